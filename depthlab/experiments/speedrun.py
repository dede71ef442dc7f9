"""speedrun: how much CPU time the course model needs to reach the validation loss of
nanoGPT's CPU recipe, with each of the field's tricks switched on alone and together.

The reference loop (depthlab.experiments.reference_gpt: nanoGPT's model and recipe, 4
layers, d 128, context 64, batch 12, lr 1e-3, 2,000 steps) runs beside the arms on the
same corpus; its final validation loss (the seed mean) is the target. Every run is
scored on the same validation windows and logs the process CPU seconds of its optimizer
steps on one thread (`cpu_s` of the train lines; evaluation left out), so an arm's time
to target is the CPU time summed up to its first evaluation at or below the target, and
its ratio is that over the reference's CPU time for the whole recipe (the issue's goal:
at most 0.35x). Steps and tokens to the target come from the same evaluation.

The arms are one table, ARMS: (name, label, overrides). The first is the baseline (the
course preset), the one named BEST combines switches fixed in the table (the analysis
says which of them paid alone). A switch pays when its arm reaches the target in every
seed and in less CPU time than the baseline, beyond the seeds' spread.

The learned values the runs' probe lines log (depthlab.train.measures.LEARNED_KEYS: the
shortcuts' lambdas and gates, nGPT's alphas; a list with one value per layer, or one
number) are drawn per layer over steps.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from depthlab.config import Config
from depthlab.errors import ConfigError, UserError
from depthlab.experiments.analysis import by_arm, loss_charts, mean_curve
from depthlab.experiments.baselines import baselines
from depthlab.experiments.report import (
    BLUE,
    GREEN,
    GREY,
    ORANGE,
    PURPLE,
    RED,
    chart,
    compare,
    mean,
    series,
    spread,
)
from depthlab.experiments.spec import (
    Budget,
    Experiment,
    Report,
    RunResult,
    RunSpec,
    Seeds,
    seed_list,
    seeded,
    variant,
    with_steps,
)
from depthlab.experiments.wording import Text, joined, phrase
from depthlab.metrics import LEARNED_KEYS
from depthlab.presets import gpt2


@dataclass(frozen=True)
class Arm:
    """One row of the race: its name, its words (`experiments.speedrun.arm.<name>` of
    depthlab/locales/<lang>/experiments.json; the English one is the legend) and the
    config overrides that make it from the course preset."""

    name: str
    overrides: tuple[str, ...]

    @property
    def label(self) -> Text:
        return arm_words(self.name)


def arm_words(name: str, **values: object) -> Text:
    return phrase(f"speedrun.arm.{name}", **values)


BASELINE = "baseline"
BEST = "best"
# The best combination's switches, from the standard race of 2026-12-02 (3 seeds): Muon
# paid alone (the target in 350-400 steps against the course preset's 600); the attention
# gate reached it in fewer steps than the course preset in every seed (550) and the
# softcap in one, neither beyond the spread of CPU time. The combination asks whether
# they add to Muon. (The quick race, one seed, had chosen U-net skips and the softcap.)
BEST_OVERRIDES = ("train.optimizer=muon", "model.attn_gate=true", "model.logit_softcap=15")
REFERENCE = "reference"
# One row per arm, each one switch on top of the course preset; BEST combines the switches
# that paid alone in the last measured race (docs/experiments.md says which, and from
# which budget). nGPT trains without warmup and weight decay, as its paper does.
ARMS: tuple[Arm, ...] = (
    Arm(BASELINE, ()),
    Arm("muon", ("train.optimizer=muon",)),
    Arm("x0-mix", ("model.x0_mix=true",)),
    Arm("backout", ("model.backout=true",)),
    Arm("value-embeds", ("model.value_embeds=true",)),
    Arm("smear", ("model.smear=true",)),
    Arm("unet-skips", ("model.unet_skips=true",)),
    Arm("softcap", ("model.logit_softcap=15",)),
    Arm("value-residual", ("model.value_residual=true",)),
    Arm("attn-gate", ("model.attn_gate=true",)),
    Arm("ngpt", ("model.residual=ngpt", "model.norm=none", "model.final_norm=false",
                 "train.warmup_steps=0", "train.weight_decay=0")),
    Arm(BEST, BEST_OVERRIDES),
)
COLORS = (BLUE, GREEN, ORANGE, PURPLE, RED, "#8c564b", "#e377c2", "#bcbd22", "#17becf",
          "#393b79", "#637939", "#843c39")
REF_COLOR = GREY
GOAL = 0.35  # the goal: an arm's CPU time to target over the reference's


@dataclass(frozen=True)
class Plan:
    """The reference's and the arms' steps, and how often both are evaluated (the
    resolution of the time to target)."""

    ref_steps: int
    arm_steps: int
    eval_every: int


RECIPE_STEPS = 2000  # nanoGPT's CPU recipe
# quick shortens the reference to a quarter of the recipe: the same recipe with 500
# iterations (lr decaying to a tenth over 500 steps), so its target is that run's final
# loss, higher than the full recipe's. standard runs the whole recipe and gives every arm
# half its steps, its schedule fitted to them as a speedrun record fits its own: the
# course preset ended below the 2,000-step recipe's loss after 500 steps in the quick
# race, and 3 seeds x 12 arms x 2,000 steps would take about 4 CPU-hours. An arm that
# does not reach the target in its steps says so. micro: seconds, for tests.
PLANS = {"micro": Plan(6, 12, 2), "quick": Plan(500, 500, 25),
         "standard": Plan(RECIPE_STEPS, RECIPE_STEPS // 2, 50)}


def plan(budget: Budget) -> Plan:
    """The budget's plan; a budget without one (full, for a GPU, where process CPU time
    misses the device's work) is refused in one line."""
    if budget.name not in PLANS:
        raise UserError(f"--budget {budget.name}: speedrun races CPU time on one thread; choose "
                        f"one of: {', '.join(PLANS)}")
    return PLANS[budget.name]


def reference_config(base: Config, budget: Budget) -> Config:
    """nanoGPT's CPU recipe as a Config (what the reference reads from it: the model's
    shape, the corpus, the train settings); micro shrinks it like the arms."""
    p, m, micro = plan(budget), base.model, budget.name == "micro"
    ref = gpt2()
    ref = replace(ref, data=base.data, model=replace(
        ref.model, n_layers=m.n_layers if micro else 4, d_model=m.d_model if micro else 128,
        n_heads=m.n_heads if micro else 4, context_len=base.train.seq_len, bias=False),
        train=base.train)
    ref = with_steps(ref, p.ref_steps)
    return _timed(replace(ref, train=replace(
        ref.train, batch_size=4 if micro else 12, lr=1e-3, min_lr_ratio=0.1,
        warmup_steps=0 if micro else 100, weight_decay=0.1, beta1=0.9, beta2=0.99,
        grad_clip=1.0)), p)


def _timed(cfg: Config, p: Plan) -> Config:
    """Evaluation every plan step, a train line (with its cpu_s) at every evaluation, one
    thread."""
    return replace(cfg, train=replace(cfg.train, eval_every=p.eval_every,
                                      probe_every=p.eval_every,
                                      log_every=math.gcd(10, p.eval_every), threads=1,
                                      ckpt_every=max(p.eval_every, cfg.train.steps // 4)))


def arm_config(base: Config, arm: Arm, p: Plan) -> Config:
    try:
        # the arm's own settings last: with_steps would reset a warmup the arm sets
        return _timed(variant(with_steps(base, p.arm_steps), *arm.overrides), p)
    except ConfigError as e:
        raise UserError(f"speedrun arm {arm.name!r} ({' '.join(arm.overrides)}) is not "
                        f"available in this build: {e}") from None


def train_reference(cfg: Config, run_dir: Path) -> None:
    """The reference run's trainer (RunSpec.trainer); torch loads only when it runs, so
    listing the experiments stays torch-free."""
    from depthlab.experiments import reference_gpt

    reference_gpt.train_reference(cfg, run_dir)


def grid(base: Config, budget: Budget, seeds: Seeds) -> list[RunSpec]:
    """The reference, then every arm of ARMS, each over the seeds (the reference's
    seeds are the arms': its seed mean is the target)."""
    p = plan(budget)
    ref = reference_config(base, budget)
    label = arm_words(REFERENCE, steps=p.ref_steps)["en"]
    specs = [RunSpec(REFERENCE, s, seeded(ref, s), label, trainer=train_reference)
             for s in seed_list(seeds)]
    for arm in ARMS:
        cfg = arm_config(base, arm, p)
        specs += [RunSpec(arm.name, s, seeded(cfg, s), arm.label["en"])
                  for s in seed_list(seeds)]
    return specs


# --- the numbers ---------------------------------------------------------------------

@dataclass(frozen=True)
class Hit:
    """Where one run first reaches the target (None: it never does)."""

    step: int | None
    tokens: int | None
    cpu_s: float | None
    cpu_total: float  # CPU seconds of all its optimizer steps
    steps: int  # steps it trained
    final: float | None  # its last validation loss


def cpu_at(run: RunResult) -> dict[int, float]:
    """Step -> CPU seconds of the optimizer steps up to it, at every train line."""
    total, out = 0.0, {0: 0.0}
    for rec in run.of("train"):
        if "cpu_s" not in rec:
            raise UserError(f"{run.run_dir}: its train lines carry no cpu_s (it was trained "
                            "before they did); pass --rerun to train it again")
        total += rec["cpu_s"]
        out[rec["step"]] = total
    return out


def hit(run: RunResult, target: float) -> Hit:
    """The first evaluation at or below the target, with the CPU time up to it."""
    cpu = cpu_at(run)
    evals = run.of("eval")
    steps = run.end["step"] if run.end else (evals[-1]["step"] if evals else 0)
    first = next((e for e in evals if e["val_loss"] <= target), None)
    if first is not None and first["step"] not in cpu:
        raise ValueError(f"{run.run_dir}: no train line at evaluated step {first['step']}")
    return Hit(first and first["step"], first and first["tokens"],
               first and cpu[first["step"]], max(cpu.values()), steps, run.final_val_loss)


def target_of(arms: dict[str, list[RunResult]]) -> float:
    return mean([r.final_val_loss for r in arms[REFERENCE]])


@dataclass(frozen=True)
class Race:
    target: float
    ref_cpu: float  # mean CPU seconds of the reference's whole recipe
    hits: dict[str, list[Hit]]  # arm -> one per seed, in seed order

    def reached(self, arm: str) -> bool:
        return all(h.step is not None for h in self.hits[arm])

    def cpu(self, arm: str) -> list[float]:
        return [h.cpu_s for h in self.hits[arm] if h.cpu_s is not None]

    def ratios(self, arm: str) -> list[float]:
        return [c / self.ref_cpu for c in self.cpu(arm)]

    def steps(self, arm: str) -> list[int]:
        return [h.step for h in self.hits[arm] if h.step is not None]

    def fastest(self) -> str | None:
        """The arm with the least mean CPU time to the target among those that reach it in
        every seed (the reference is the yardstick, not an arm); None when none does.
        `--preset speedrun` is this arm of the committed standard race
        (tests/test_speedrun_preset.py)."""
        done = [a for a in self.hits if a != REFERENCE and self.reached(a)]
        return min(done, key=lambda a: mean(self.cpu(a))) if done else None

    def pays(self, arm: str) -> bool:
        """Reaches the target in every seed, in fewer steps and in less CPU time than the
        baseline, each beyond the seeds' spread (or where the baseline does not reach it).
        Fewer steps are required because CPU time per step moves with the machine's load
        at the time an arm runs: an arm's seeds run side by side, the arms one after
        another, so a steadier load during one arm shows as a spread of a few tenths of a
        second and a real-looking gap of several seconds. In the standard race of
        2026-12-02 value embeddings' steps measured 9% cheaper than the course preset's
        though they do more work; the single-seed quick race had U-net skips 12% faster
        to the target at the same step for the same reason. With one seed there is no
        spread: fewer steps and less CPU time suffice."""
        if not self.reached(arm):
            return False
        if not self.reached(BASELINE):
            return True
        cpu_gap, cpu_real = compare(self.cpu(BASELINE), self.cpu(arm))
        steps_gap, steps_real = compare(self.steps(BASELINE), self.steps(arm))
        return cpu_gap < 0 and cpu_real and steps_gap < 0 and steps_real


def race(arms: dict[str, list[RunResult]]) -> Race:
    target = target_of(arms)
    hits = {arm: [hit(r, target) for r in runs] for arm, runs in arms.items()}
    return Race(target, mean([h.cpu_total for h in hits[REFERENCE]]), hits)


# --- the report ----------------------------------------------------------------------

def analyze(results: list[RunResult], budget: Budget) -> Report:
    arms = by_arm(results)
    r = race(arms)
    base = baselines(arms[BASELINE][0].spec.cfg)
    style = {name: (COLORS[i % len(COLORS)], False) for i, name in enumerate(a.name for a in ARMS)}
    style[REFERENCE] = (REF_COLOR, True)
    charts = [cpu_chart(arms, r, style), *loss_charts(arms, style, base)]
    charts += learned_charts(arms)
    report = Report(charts=charts, baselines=base.to_json(), per_seed=per_seed(arms, r))
    report.table["columns"] = ["arm", "seeds at target", "CPU-s to target", "x reference CPU-s",
                               "steps to target", "tokens to target", "CPU ms per step",
                               "final val loss"]
    report.table["rows"] = [table_row(arms[a][0].spec.label, a, r) for a in arms]
    report.conclusions = conclusions(arms, r, budget)
    return report


def _mean_spread(values: list[float], digits: int, scale: float = 1.0) -> str:
    if not values:
        return "-"
    m = f"{mean(values) * scale:,.{digits}f}"
    return f"{m} ± {spread(values) * scale:,.{digits}f}" if len(values) > 1 else m


def table_row(label: str, arm: str, r: Race) -> list[str]:
    hits = r.hits[arm]
    n = sum(h.step is not None for h in hits)
    per_step = [h.cpu_total / h.steps for h in hits if h.steps]
    return [label, f"{n} of {len(hits)}", _mean_spread(r.cpu(arm), 2), _mean_spread(r.ratios(arm), 2),
            _mean_spread([h.step for h in hits if h.step is not None], 0),
            _mean_spread([h.tokens for h in hits if h.tokens is not None], 0),
            _mean_spread(per_step, 1, 1000),
            _mean_spread([h.final for h in hits if h.final is not None], 4)]


def per_seed(arms: dict[str, list[RunResult]], r: Race) -> dict[str, dict]:
    """export.json's per_seed: each arm's seeds and final losses (the shared keys) and
    where each seed met the target: step, tokens, CPU seconds, ratio (None: never), and
    the CPU seconds of its whole run."""
    out = {}
    for arm, runs in arms.items():
        hits = r.hits[arm]
        out[arm] = {
            "seed": [x.spec.seed for x in runs],
            "final_val_loss": [x.final_val_loss for x in runs],
            "completed": [bool(x.end and x.end.get("status") == "completed") for x in runs],
            "steps": runs[0].spec.cfg.train.steps,
            "target": r.target, "reference_cpu_s": r.ref_cpu,
            "steps_to_target": [h.step for h in hits],
            "tokens_to_target": [h.tokens for h in hits],
            "cpu_s_to_target": [h.cpu_s for h in hits],
            "ratio_to_reference": [None if h.cpu_s is None else h.cpu_s / r.ref_cpu
                                   for h in hits],
            "cpu_s_total": [h.cpu_total for h in hits]}
    return out


def _note(n: int, noise: float) -> Text:
    if n < 2:
        return phrase("speedrun.one_seed")
    return phrase("note.seeds", seeds=n, spread=f"{noise:.2f}")


def conclusions(arms: dict[str, list[RunResult]], r: Race, budget: Budget) -> list[Text]:
    p = plan(budget)
    ref = arms[REFERENCE]
    ref_final = [x.final_val_loss for x in ref]
    out = [phrase(
        "speedrun.target", target=f"{r.target:.4f}", steps=p.ref_steps,
        shortened=phrase("speedrun.shortened" if p.ref_steps < RECIPE_STEPS else "speedrun.full",
                         steps=p.ref_steps, recipe=RECIPE_STEPS),
        note=phrase("note.one_seed") if len(ref) < 2 else phrase(
            "note.seeds", seeds=len(ref), spread=f"{spread(ref_final):.4f}"),
        cpu=f"{r.ref_cpu:.2f}", arm_steps=p.arm_steps)]
    racing = [a for a in arms if a != REFERENCE]
    best = r.fastest()
    if best is not None:
        ratio = mean(r.ratios(best))
        out.append(phrase("speedrun.fastest", arm=_words(best, p),
                          cpu=_mean_spread(r.cpu(best), 2), ratio=f"{ratio:.2f}", goal=f"{GOAL:.2f}",
                          verdict=phrase("speedrun.goal_met" if ratio <= GOAL
                                         else "speedrun.goal_missed")))
    else:
        out.append(phrase("speedrun.none_reached", steps=p.arm_steps))
    for arm in racing:
        out.append(arm_sentence(arm, r, p))
    switches = [a for a in racing if a not in (BASELINE, BEST)]
    paid = [a for a in switches if r.pays(a)]
    unpaid = [a for a in switches if not r.pays(a)]
    names = lambda xs: joined([arm_words(a) for a in xs])  # noqa: E731
    seeds = min(len(hits) for hits in r.hits.values())
    note = phrase("note.one_seed") if seeds < 2 else phrase("speedrun.seeds", seeds=seeds)
    if switches:
        out.append(phrase("speedrun.do_not_pay", arms=names(unpaid), note=note) if unpaid
                   else phrase("speedrun.all_pay", note=note))
        if paid:
            out.append(phrase("speedrun.pay", arms=names(paid), note=note))
    if BEST in arms:
        best_arm = next(a for a in ARMS if a.name == BEST)
        alone = [a.name for a in ARMS if set(a.overrides) <= set(best_arm.overrides)
                 and a.overrides and a.name != BEST and a.name in arms]
        out.append(phrase(
            "speedrun.combination", alone=names(alone) if alone else phrase("speedrun.nothing"),
            paid=names([a for a in paid if a in alone]) if set(paid) & set(alone)
            else phrase("speedrun.nothing"),
            unpaid=names([a for a in unpaid if a in alone]) if set(unpaid) & set(alone)
            else phrase("speedrun.nothing"),
            verdict=phrase("speedrun.combination_pays" if r.pays(BEST)
                           else "speedrun.combination_does_not")))
    out += learned_sentences(arms)
    return out


def _words(arm: str, p: Plan) -> Text:
    return arm_words(arm, steps=p.ref_steps)


def arm_sentence(arm: str, r: Race, p: Plan) -> Text:
    label = _words(arm, p)
    hits = r.hits[arm]
    per_step = [1000 * h.cpu_total / h.steps for h in hits if h.steps]
    if not r.reached(arm):
        n = sum(h.step is not None for h in hits)
        return phrase("speedrun.never", arm=label, n=n, seeds=len(hits), steps=hits[0].steps,
                      final=_mean_spread([h.final for h in hits if h.final is not None], 4))
    numbers = {"arm": label, "cpu": _mean_spread(r.cpu(arm), 2), "ratio": _mean_spread(r.ratios(arm), 2),
               "steps": _mean_spread([h.step for h in hits], 0), "ms": _mean_spread(per_step, 1)}
    if arm == BASELINE:
        return phrase("speedrun.baseline", **numbers)
    if not r.reached(BASELINE):
        return phrase("speedrun.versus_unreached", **numbers)
    base_hits = r.hits[BASELINE]
    gap, _ = compare(r.cpu(BASELINE), r.cpu(arm))
    return phrase(
        "speedrun.versus", **numbers, base_cpu=_mean_spread(r.cpu(BASELINE), 2),
        base_steps=_mean_spread([h.step for h in base_hits], 0),
        base_ms=_mean_spread([1000 * h.cpu_total / h.steps for h in base_hits if h.steps], 1),
        verdict=phrase("speedrun.pays" if r.pays(arm) else "speedrun.does_not_pay"),
        note=_note(min(len(hits), len(base_hits)),
                   spread(r.cpu(arm)) + spread(r.cpu(BASELINE))),
        gap=f"{gap:+.2f}")


def cpu_chart(arms: dict[str, list[RunResult]], r: Race,
              style: dict[str, tuple[str, bool]]) -> dict:
    """Validation loss over the CPU seconds of training (seed means at each evaluated
    step), with the target as a flat line."""
    lines = []
    for arm, runs in arms.items():
        cpus = [cpu_at(x) for x in runs]
        steps, vals = mean_curve(runs, "eval", "val_loss")
        keep = [i for i, s in enumerate(steps) if all(s in c for c in cpus)]
        xs = [mean([c[steps[i]] for c in cpus]) for i in keep]
        color, dash = style.get(arm, (None, False))
        lines.append(series(runs[0].spec.label, xs, [vals[i] for i in keep], color, dash))
    end = max((max(s["x"]) for s in lines if s["x"]), default=1.0)
    lines.append(series(f"target ({r.target:.4f})", [0, end], [r.target, r.target], RED, True))
    return chart("val_loss_cpu", phrase("speedrun.chart.cpu"), phrase("speedrun.axis.cpu"),
                 phrase("axis.val_loss"), lines)


def _layers(value: object) -> dict[int, float] | None:
    """A logged learned value as {layer: number} (one number: layer 0; None entries, the
    layers without one, left out), or None when it is not a learned value's shape."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {0: float(value)}
    if isinstance(value, list) and any(v is not None for v in value) and all(
            v is None or isinstance(v, int | float) for v in value):
        return {i: float(v) for i, v in enumerate(value) if v is not None}
    return None


def learned_series(runs: list[RunResult]) -> dict[str, tuple[list[int], dict[int, list[float]]]]:
    """key -> (steps, {layer: the seed-mean value at each step}), for every key of
    LEARNED_KEYS the runs log, on any line kind; only steps every run logged are kept."""
    per_key: dict[str, dict[int, list[dict[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for rec in run.records:
            for key in LEARNED_KEYS:
                if key in rec and (layers := _layers(rec[key])) is not None:
                    per_key[key][rec["step"]].append(layers)
    out = {}
    for key, by_step in per_key.items():
        steps = sorted(s for s, vs in by_step.items() if len(vs) == len(runs))
        if not steps:
            continue
        layers = sorted(by_step[steps[0]][0])
        out[key] = (steps, {i: [mean([v[i] for v in by_step[s]]) for s in steps]
                            for i in layers})
    return out


def learned_chart_id(arm: str, key: str) -> str:
    """The id (and file name) of the chart of one arm's learned value; the page's section
    finds it in export.json by this id (depthlab.experiments.speedrun_readings)."""
    return re.sub(r"[^A-Za-z0-9]+", "_", f"learned_{arm}_{key}")


def learned_charts(arms: dict[str, list[RunResult]]) -> list[dict]:
    charts = []
    for arm, runs in arms.items():
        for key, (steps, layers) in sorted(learned_series(runs).items()):
            lines = [series(f"layer {i}", steps, ys, COLORS[i % len(COLORS)])
                     for i, ys in layers.items()]
            charts.append(chart(learned_chart_id(arm, key), phrase(
                "speedrun.chart.learned", name=key,
                arm=arm_words(arm, steps=runs[0].spec.cfg.train.steps)),
                phrase("axis.step"), phrase("speedrun.axis.value", name=key), lines))
    return charts


def learned_sentences(arms: dict[str, list[RunResult]]) -> list[Text]:
    out = []
    for runs in arms.values():
        for key, (steps, layers) in sorted(learned_series(runs).items()):
            spec = runs[0].spec
            out.append(phrase("speedrun.learned", name=key,
                              arm=arm_words(spec.arm, steps=spec.cfg.train.steps),
                              step=steps[-1],
                              values=" / ".join(f"{ys[-1]:.3f}" for ys in layers.values()),
                              start=" / ".join(f"{ys[0]:.3f}" for ys in layers.values())))
    if not out:
        out.append(phrase("speedrun.no_learned"))
    return out


# What the reference changes from the course model and its training settings, then the
# keys the arms switch.
REFERENCE_KEYS = ("model.norm", "model.ffn", "model.position", "model.context_len",
                  "train.batch_size", "train.lr", "train.beta2", "train.warmup_steps",
                  "train.steps", "train.ckpt_every")
SWITCHES = REFERENCE_KEYS + tuple(sorted({o.split("=", 1)[0] for a in ARMS for o in a.overrides}))

EXPERIMENT = Experiment("speedrun", SWITCHES, grid, analyze)
