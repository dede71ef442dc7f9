"""residual-frontier: the designs that change the residual line `x = x + F(x)` (the
lesson's C8 and C15), trained side by side on the course model at 12 and 48 layers.

Every arm is the course model (Pre-RMSNorm, SwiGLU, RoPE, warmup) with one switch
changed, except the two Post-LN arms, which train without warmup: DeepNorm, and plain
Post-LN as the failing reference of the lesson's C8 point ("DeepNorm trains Post-LN at
48 layers without warmup, where plain Post-LN fails"). Adding a design is one line in
ARMS. The analysis reports validation loss with its seed spread beside the unigram and
bigram baselines of the same tokens, the stream RMS after each write and the gradient of
each block (at init and after training) from the runs' probe lines, time per step from an
interleaved benchmark (frontier_timing), and the learned mixing matrices / depth weights
read from the trained checkpoints (frontier_learned). A difference between arms is
claimed only beyond the seed spread.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

from depthlab.config import Config
from depthlab.errors import ConfigError, UserError
from depthlab.experiments.analysis import VAL, by_arm, final_values, loss_charts, mean_curve
from depthlab.experiments.baselines import Baselines, left_plateau, plateau_margin
from depthlab.experiments.placement import HIGH_LR
from depthlab.experiments.report import GREY, ORANGE, chart, fmt, mean, series, spread
from depthlab.experiments.spec import (
    Budget,
    Experiment,
    Report,
    RunResult,
    RunSpec,
    specs_over_seeds,
    variant,
    with_steps,
)
from depthlab.locales import text, texts


@dataclass(frozen=True)
class Arm:
    """One design: the overrides that switch it on over the course model."""

    name: str
    label: str
    overrides: tuple[str, ...]
    color: str
    warmup: bool = True  # False: trained without learning-rate warmup (the C8 pair)


# The C8 pair trains in the setting where the norm-placement experiment shows plain Post-LN
# failing: no warmup, plain 0.02 init (DeepNorm brings its own beta init), lr HIGH_LR (5e-3).
# There both end on the unigram plateau (3.307 / 3.307, seed 0), so the C8 point does not show.
# A scan for a setting that shows it (2026-12-01; 48 layers, quick's batch, evaluation and
# probes, 100 steps, no warmup, scaled_init=false, one thread; final val loss, unigram 3.3045,
# "trains" means below 3.264, baselines.left_plateau):
#   lr 5e-4  DeepNorm  3.314 (s0)
#   lr 1e-3  DeepNorm  3.308 (s0)
#   lr 2e-3  DeepNorm  3.307 (s0), 3.200 (s1);  plain Post-LN 2.344 (s0), 2.350 (s1)
#   lr 3e-3  plain Post-LN 3.307 (s0)
#   lr 5e-3  DeepNorm  3.307 (s0);  plain Post-LN 3.307 (s0)  (the earlier trial)
# (and with the 0.02/sqrt(2L) init at the course lr 3e-3 plain Post-LN trains: 2.44 at step 70).
# It came out the other way: plain Post-LN trains at 2e-3 (both seeds) and stalls at 3e-3 and
# 5e-3; DeepNorm stalls at every lr tried, its input dependence (probes) falling from 0.18 below
# 1e-4 within 25 steps (only seed 1 at 2e-3 starts to leave the plateau), and with 10 warmup
# steps at 1e-3 it stalls too (3.309). No setting scanned separates the pair in the lesson's
# direction, so it stays at 5e-3, where both stall; c8_sentence says what came out.
C8_SETTING = ("model.scaled_init=false", f"train.lr={HIGH_LR:g}")

ARMS: tuple[Arm, ...] = (
    Arm("plain", "plain (Pre-LN)", ("model.residual=plain",), "#1f77b4"),
    Arm("scaled", "scaled 1/sqrt(2L)", ("model.residual=scaled",), "#17becf"),
    Arm("deepnorm", f"DeepNorm (Post-LN, no warmup, lr {HIGH_LR:g})",
        ("model.placement=post", "model.residual=deepnorm", *C8_SETTING), "#2ca02c",
        warmup=False),
    Arm("rezero", "ReZero", ("model.residual=rezero",), "#bcbd22"),
    # LayerNorm Scaling without the 1/sqrt(2L) init: the paper finds the two together weaker
    # and recommends dropping the scaled init (Sun et al. 2025, footnote to the abstract).
    Arm("lns", "LayerNorm Scaling 1/sqrt(l)", ("model.norm_scale=depth", "model.scaled_init=false"),
        "#7f7f7f"),
    Arm("dyt", "DyT instead of the norms", ("model.norm=dyt",), "#aec7e8"),
    Arm("value-residual", "value residual", ("model.value_residual=true",), "#8c564b"),
    Arm("hc", "hyper-connections (n = 4)", ("model.residual=hc", "model.streams=4"), "#ff7f0e"),
    Arm("mhc", "mHC (n = 4)", ("model.residual=mhc", "model.streams=4"), "#9467bd"),
    Arm("attnres", "attention residuals", ("model.residual=attnres",), "#e377c2"),
    Arm("post-ln", f"plain Post-LN, no warmup, lr {HIGH_LR:g} (reference)",
        ("model.placement=post", *C8_SETTING), "#d62728", warmup=False),
)
ARM_BY_NAME = {a.name: a for a in ARMS}
ARM_NAMES = tuple(ARM_BY_NAME)
REFERENCE = "plain"  # every arm is compared with it at the same depth
C8_PAIR = ("deepnorm", "post-ln")  # the lesson's C8 point, at the deepest depth
STREAM_ARMS = ("hc", "mhc")  # n = 4 copies of the stream
QUICK_STEPS = 100  # steps of every quick run (estimated_seconds keeps quick in its bound)

# Seconds of one core per (layer x training step) of the course model at batch 16 x 64,
# evaluations, probes and checkpoints included, measured as process CPU time on the 2-core
# lab machine under load: 48 layers x 100 steps of plain Post-LN in 172 s (0.036), 81 steps
# of another 48-layer run in 127 s (0.033), and three 12-layer runs of 100 steps plus their
# benchmark and analysis in 149 s (0.037 per layer-step of runs and benchmark calls). The
# residual experiment's quick budget gave 0.033. The n = 4 stream arms are counted at
# STREAM_COST, the bound on their time per step.
LAYER_STEP_S = 0.036
STREAM_COST = 1.3
QUICK_LIMIT_S = 15 * 60


@dataclass(frozen=True)
class Plan:
    """What one budget runs: (depth, arms, steps) per depth, and the benchmark's size."""

    depths: tuple[tuple[int, tuple[str, ...], int], ...]
    timing_rounds: int
    timing_calls: int


def plan(b: Budget) -> Plan:
    """quick affords the 12-layer stack for the designs and 48 layers for the C8 pair
    only (estimated_seconds keeps it under QUICK_LIMIT_S); the others run every arm at
    both depths (micro shrinks them to 3 and 6 layers for tests)."""
    if b.name == "quick":
        shallow = tuple(a for a in ARM_NAMES if a not in C8_PAIR)
        return Plan(((b.deep, shallow, QUICK_STEPS), (b.deepest, C8_PAIR, QUICK_STEPS)),
                    timing_rounds=5, timing_calls=2)
    rounds, calls = (2, 1) if b.name == "micro" else (b.timing_rounds, 3)
    return Plan(((b.deep, ARM_NAMES, b.steps), (b.deepest, ARM_NAMES, b.steps)), rounds, calls)


def arm_name(depth: int, arm: str) -> str:
    return f"L{depth}-{arm}"


def split_arm(name: str) -> tuple[int, str]:
    """`L48-deepnorm` -> (48, "deepnorm")."""
    depth, arm = name.split("-", 1)
    return int(depth[1:]), arm


def arm_config(base: Config, arm: Arm, depth: int, steps: int) -> Config:
    try:
        cfg = with_steps(variant(base, f"model.n_layers={depth}", *arm.overrides), steps)
        return cfg if arm.warmup else variant(cfg, "train.warmup_steps=0")
    except ConfigError as e:
        raise UserError(f"residual-frontier arm {arm.name!r} ({' '.join(arm.overrides)}) is "
                        f"not available in this build: {e}") from None


def grid(base: Config, b: Budget, seeds: int,
         only: Collection[str] | None = None) -> list[RunSpec]:
    """Every arm of the budget's plan (or the named subset `only`), each over `seeds`."""
    unknown = sorted(set(only or ()) - set(ARM_NAMES))
    if unknown:
        raise UserError(f"unknown residual-frontier arm(s) {', '.join(unknown)}; "
                        f"choose from: {', '.join(ARM_NAMES)}")
    arms = []
    for depth, names, steps in plan(b).depths:
        for name in names:
            if only is not None and name not in only:
                continue
            arm = ARM_BY_NAME[name]
            arms.append((arm_name(depth, name), f"{arm.label}, {depth} layers",
                         arm_config(base, arm, depth, steps)))
    return specs_over_seeds(arms, seeds)


def estimated_seconds(p: Plan, seeds: int) -> float:
    """CPU seconds of one core for a plan's runs and its benchmark: LAYER_STEP_S per layer
    and step (STREAM_COST times that for the n = 4 stream arms); a benchmark call counts
    as a training step of the first depth for every arm of that depth."""
    cost = lambda names: sum(STREAM_COST if n in STREAM_ARMS else 1.0 for n in names)
    runs = sum(depth * steps * cost(names) * seeds for depth, names, steps in p.depths)
    depth, names, _ = p.depths[0]
    bench = (p.timing_rounds * p.timing_calls + 1) * depth * cost(names)  # + 1: warm-up
    return LAYER_STEP_S * (runs + bench)


# --- analysis ------------------------------------------------------------------------

def analyze(results: list[RunResult], b: Budget) -> Report:
    """Measure what the logs do not hold (baselines, the benchmark, the learned
    structures), then build the report; the page's data go to frontier.json beside
    export.json."""
    from depthlab.experiments import frontier_learned, frontier_timing
    from depthlab.experiments.baselines import baselines

    base = baselines(results[0].spec.cfg)
    p = plan(b)
    depth = p.depths[0][0]
    bench_specs = {split_arm(r.spec.arm)[1]: r.spec.cfg for r in results
                   if split_arm(r.spec.arm)[0] == depth and r.spec.seed == results[0].spec.seed}
    timing = frontier_timing.time_arms(bench_specs, rounds=p.timing_rounds, calls=p.timing_calls)
    learned = frontier_learned.read_runs(
        [r for r in results if split_arm(r.spec.arm)[1] in frontier_learned.LEARNED_ARMS])
    report, data = build_report(results, base, timing, learned, b.name)
    frontier_learned.write_page_data(results[0].run_dir.parent.parent, data)
    return report


def build_report(results: list[RunResult], base: Baselines, timing: dict,
                 learned: dict, budget: str) -> tuple[Report, dict]:
    """The report and the page's data from the runs' metric logs and the measurements:
    pure, so tests feed it synthetic logs."""
    arms = by_arm(results)
    depths = sorted({split_arm(a)[0] for a in arms})
    seeds = min(len(runs) for runs in arms.values())
    report = Report(baselines=base.to_json())
    report.charts.append(_finals_chart(arms, depths, base, seeds))
    for depth in depths:
        at = {a: runs for a, runs in arms.items() if split_arm(a)[0] == depth}
        style = {a: (ARM_BY_NAME[split_arm(a)[1]].color, not ARM_BY_NAME[split_arm(a)[1]].warmup)
                 for a in at}
        for c in loss_charts(at, style, base):
            c["id"] += f"_L{depth}"
            c["title"] = {k: text("frontier.chart.at_depth", k, title=v, depth=depth)
                          for k, v in c["title"].items()}
            report.charts.append(c)
        report.charts.append(_rms_chart(at, depth))
        for when in ("init", "trained"):
            report.charts.append(_grad_chart(at, depth, when))

    report.table["columns"] = ["layers", "arm", "final val loss", "vs plain",
                               "stream RMS after the last write (trained)",
                               "bottom / top block gradient (init -> trained)",
                               "ms per step (benchmark)", "time vs plain"]
    for a, runs in arms.items():
        depth, name = split_arm(a)
        ref = arms.get(arm_name(depth, REFERENCE))
        gap = "" if ref is None or name in (REFERENCE, *C8_PAIR) else _gap_cell(final_values(ref),
                                                                  final_values(runs))
        t = timing.get("arms", {}).get(name) if depth == timing.get("depth") else None
        report.table["rows"].append([
            depth, name, fmt(final_values(runs)), gap, f"{_last_rms(runs):.3g}",
            f"{_grad_ratio(runs, 0):.3g} -> {_grad_ratio(runs, -1):.3g}",
            "" if t is None else f"{t['thread_median_ms']:.1f}",
            "" if t is None else f"{t['vs_plain']:.2f}x"])
    report.table["rows"].append(["-", "unigram baseline", f"{base.unigram:.4f}", "", "", "", "", ""])
    report.table["rows"].append(["-", "bigram baseline", f"{base.bigram:.4f}", "", "", "", "", ""])

    report.conclusions.append(plan_sentence(arms, depths, budget, seeds))
    for depth in depths:
        sentence = compare_sentence(arms, depth)
        if sentence is not None:
            report.conclusions.append(sentence)
    c8 = c8_sentence(arms, depths[-1], base)
    if c8 is not None:
        report.conclusions.append(c8)
    for depth in depths:
        report.conclusions.append(stream_sentence(arms, depth))
        report.conclusions.append(grad_sentence(arms, depth))
    if timing.get("arms"):
        report.conclusions.append(timing_sentence(timing))
    if learned:
        report.conclusions.append(learned_sentence(learned))
    report.conclusions.append(texts(
        "frontier.baselines", tokens=f"{base.tokens:,}", windows=base.windows,
        val_tokens=f"{base.val_tokens:,}", unigram=f"{base.unigram:.4f}",
        bigram=f"{base.bigram:.4f}"))
    return report, page_data(arms, base, timing, learned, seeds)


def _gap_cell(ref: list[float], values: list[float]) -> str:
    gap = mean(values) - mean(ref)
    if not math.isfinite(gap):
        return "diverged"
    if min(len(ref), len(values)) < 2:
        return f"{gap:+.4f} (1 seed)"
    beyond = abs(gap) > spread(ref) + spread(values)
    return f"{gap:+.4f}" + ("" if beyond else " (within spread)")


def _probe(run: RunResult, index: int) -> dict:
    probes = run.of("probe")
    return probes[index] if probes else {}


def _last_rms(runs: list[RunResult]) -> float:
    return mean([(_probe(r, -1).get("resid_rms") or [math.nan])[-1] for r in runs])


def _grad_ratio(runs: list[RunResult], index: int) -> float:
    """Bottom block's gradient over the top block's, seed mean, at a probe line."""
    def ratio(r: RunResult) -> float:
        g = _probe(r, index).get("grad_params") or []
        return g[0] / g[-1] if len(g) > 1 and g[-1] else math.nan
    return mean([ratio(r) for r in runs])


def mean_profile(runs: list[RunResult], key: str, index: int) -> list[float]:
    """The seed mean of a per-block (or per-write) list of one probe line."""
    rows = [_probe(r, index).get(key) for r in runs]
    rows = [row for row in rows if row]
    if not rows:
        return []
    n = min(len(row) for row in rows)
    return [mean([row[i] for row in rows]) for i in range(n)]


def _finals_chart(arms: dict, depths: list[int], base: Baselines, seeds: int) -> dict:
    curves = []
    for name in ARM_NAMES:
        present = [d for d in depths if arm_name(d, name) in arms]
        if not present:
            continue
        values = [final_values(arms[arm_name(d, name)]) for d in present]
        arm = ARM_BY_NAME[name]
        curves.append(series(arm.label, present, [mean(v) for v in values], arm.color,
                             dash=not arm.warmup, lo=[min(v) for v in values],
                             hi=[max(v) for v in values]))
    for label, value, color in (("unigram", base.unigram, GREY), ("bigram", base.bigram, ORANGE)):
        curves.append(series(f"{label} baseline ({value:.4f})", depths, [value] * len(depths),
                             color, dash=True))
    return chart("finals", texts("frontier.chart.finals", seeds=seeds),
                 texts("frontier.axis.layers"), VAL, curves)


def _rms_chart(at: dict, depth: int) -> dict:
    curves = []
    for a, runs in at.items():
        arm = ARM_BY_NAME[split_arm(a)[1]]
        rms = mean_profile(runs, "resid_rms", -1)
        curves.append(series(arm.label, list(range(len(rms))), rms, arm.color, dash=not arm.warmup))
    return chart(f"stream_rms_L{depth}", texts("frontier.chart.rms", depth=depth),
                 texts("frontier.axis.writes"), texts("frontier.axis.rms"), curves, y_log=True)


def _grad_chart(at: dict, depth: int, when: str) -> dict:
    index = 0 if when == "init" else -1
    curves = []
    for a, runs in at.items():
        arm = ARM_BY_NAME[split_arm(a)[1]]
        g = mean_profile(runs, "grad_params", index)
        curves.append(series(arm.label, list(range(1, len(g) + 1)), g, arm.color,
                             dash=not arm.warmup))
    return chart(f"grads_{when}_L{depth}", texts(f"frontier.chart.grads_{when}", depth=depth),
                 texts("frontier.axis.block"), texts("frontier.axis.grad"), curves, y_log=True)


# --- conclusions -----------------------------------------------------------------------

def plan_sentence(arms: dict, depths: list[int], budget: str, seeds: int) -> dict[str, str]:
    """What this budget ran, read from the runs themselves."""
    parts = []
    for depth in depths:
        names = [split_arm(a)[1] for a in arms if split_arm(a)[0] == depth]
        steps = sorted({r.spec.cfg.train.steps for a, runs in arms.items()
                        if split_arm(a)[0] == depth for r in runs})
        parts.append(f"{depth}: {', '.join(names)} ({'/'.join(map(str, steps))})")
    return texts("frontier.plan", budget=budget, seeds=seeds, runs="; ".join(parts))


def compare_sentence(arms: dict, depth: int) -> dict[str, str] | None:
    """Each arm trained like plain (the C8 pair is not: see c8_sentence) against plain at
    one depth: lower, higher, or within the seed spread (a claim needs two seeds and a gap
    beyond the sum of both arms' spreads)."""
    ref = arms.get(arm_name(depth, REFERENCE))
    others = [n for n in ARM_NAMES if n not in (REFERENCE, *C8_PAIR) and arm_name(depth, n) in arms]
    if ref is None or not others:
        return None
    a = final_values(ref)
    seeds = min(len(arms[arm_name(depth, n)]) for n in others + [REFERENCE])
    item = lambda n, v: f"{n} {fmt(v)} ({mean(v) - mean(a):+.4f})"
    if seeds < 2:
        listed = ", ".join(item(n, final_values(arms[arm_name(depth, n)])) for n in others)
        return texts("frontier.compare.one_seed", depth=depth, plain=fmt(a), finals=listed)
    lower, higher, within, broken = [], [], [], []
    for n in others:
        v = final_values(arms[arm_name(depth, n)])
        gap = mean(v) - mean(a)
        if not math.isfinite(gap):
            broken.append(n)
        elif abs(gap) <= spread(a) + spread(v):
            within.append(item(n, v))
        else:
            (lower if gap < 0 else higher).append(item(n, v))
    en, zh = texts("frontier.none")["en"], texts("frontier.none")["zh"]
    out = {}
    for lang, none in (("en", en), ("zh", zh)):
        sep = ", " if lang == "en" else ","
        join = lambda xs, none=none, sep=sep: sep.join(xs) or none
        out[lang] = texts("frontier.compare.seeds", depth=depth, seeds=seeds, plain=fmt(a),
                          lower=join(lower), higher=join(higher), within=join(within),
                          diverged=join(broken))[lang]
    return out


def outcome(runs: list[RunResult], base: Baselines) -> str:
    """"trains" (every seed finished, mean below the plateau), "diverged" or "plateau"."""
    if any(r.end and r.end.get("status") == "failed" for r in runs) or not all(
            math.isfinite(v) for v in final_values(runs)):
        return "diverged"
    return "trains" if left_plateau(final_values(runs), base) else "plateau"


def c8_sentence(arms: dict, depth: int, base: Baselines) -> dict[str, str] | None:
    """The lesson's C8 point at the deepest depth: DeepNorm trains without warmup where
    plain Post-LN does not; said as it came out, whichever way."""
    dn, post = arms.get(arm_name(depth, "deepnorm")), arms.get(arm_name(depth, "post-ln"))
    if dn is None or post is None:
        return None
    got = outcome(dn, base), outcome(post, base)
    margin = max(plateau_margin(final_values(dn), base), plateau_margin(final_values(post), base))
    values = dict(depth=depth, deepnorm=fmt(final_values(dn)), post=fmt(final_values(post)),
                  unigram=f"{base.unigram:.4f}", margin=f"{margin:.3f}", seeds=len(dn))
    if got[0] == "trains" and got[1] != "trains":
        how = texts(f"frontier.fail.{got[1]}")
        return {lang: texts("frontier.c8.holds", how=how[lang], **values)[lang] for lang in how}
    if got == ("trains", "trains"):
        return texts("frontier.c8.both_train", **values)
    how = texts(f"frontier.fail.{got[0]}")
    return {lang: texts("frontier.c8.deepnorm_fails", how=how[lang], **values)[lang]
            for lang in how}


def stream_sentence(arms: dict, depth: int) -> dict[str, str]:
    listed = ", ".join(f"{split_arm(a)[1]} {_last_rms(runs):.3g} "
                       f"({_last_rms(runs) / mean_profile(runs, 'resid_rms', -1)[0]:.2g}x)"
                       for a, runs in arms.items() if split_arm(a)[0] == depth
                       and mean_profile(runs, "resid_rms", -1))
    return texts("frontier.stream", depth=depth, listed=listed)


def grad_sentence(arms: dict, depth: int) -> dict[str, str]:
    listed = ", ".join(f"{split_arm(a)[1]} {_grad_ratio(runs, 0):.2g} -> {_grad_ratio(runs, -1):.2g}"
                       for a, runs in arms.items() if split_arm(a)[0] == depth)
    return texts("frontier.grads", depth=depth, listed=listed)


def timing_sentence(timing: dict) -> dict[str, str]:
    listed = ", ".join(f"{n} {t['thread_median_ms']:.1f} ms ({t['vs_plain']:.2f}x)"
                       for n, t in timing["arms"].items())
    return texts("frontier.timing", depth=timing["depth"], shape=timing["shape"],
                 rounds=timing["rounds"], listed=listed)


def learned_sentence(learned: dict) -> dict[str, str]:
    parts = []
    for key, entry in learned.items():
        if entry.get("mixing"):
            parts.append(f"{key}: {len(entry['mixing'])} mixing matrices, composite gain "
                         f"{entry['composite_gain']:.3g}")
        if entry.get("depth_weights"):
            parts.append(f"{key}: depth weights of {len(entry['depth_weights'])} sublayers")
    if not parts:
        return texts("frontier.learned.none", arms=", ".join(sorted(learned)) or "-")
    return texts("frontier.learned.some", listed="; ".join(parts))


# --- the page's data -------------------------------------------------------------------

def page_data(arms: dict, base: Baselines, timing: dict, learned: dict, seeds: int) -> dict:
    """frontier.json: per arm and depth the loss curves, the final losses with their
    spread, the stream RMS per write and the gradient per block (init and trained), plus
    the benchmark and the learned mixing matrices / depth weights."""
    out: dict = {"seeds": seeds, "baselines": base.to_json(), "timing": timing,
                 "learned": learned, "arms": {}}
    for a, runs in arms.items():
        depth, name = split_arm(a)
        finals = final_values(runs)
        out["arms"][a] = {
            "arm": name, "depth": depth, "label": ARM_BY_NAME[name].label,
            "color": ARM_BY_NAME[name].color, "warmup": ARM_BY_NAME[name].warmup,
            "final_val_loss": [v if math.isfinite(v) else None for v in finals],
            "mean": mean(finals) if math.isfinite(mean(finals)) else None,
            "spread": spread(finals),
            "val_curve": dict(zip(("step", "loss"), mean_curve(runs, "eval", "val_loss"),
                                  strict=True)),
            "train_curve": dict(zip(("step", "loss"), mean_curve(runs, "train", "loss"),
                                    strict=True)),
            "stream_rms_trained": mean_profile(runs, "resid_rms", -1),
            "grad_per_block_init": mean_profile(runs, "grad_params", 0),
            "grad_per_block_trained": mean_profile(runs, "grad_params", -1),
        }
    return out


EXPERIMENT = Experiment(
    "residual-frontier",
    ("model.residual", "model.placement", "model.norm", "model.norm_scale", "model.value_residual",
     "model.streams", "model.n_layers", "model.scaled_init", "train.warmup_steps", "train.lr"),
    grid, analyze)
