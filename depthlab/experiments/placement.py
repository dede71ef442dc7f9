"""norm-placement: does Post-Norm need learning-rate warmup where Pre-Norm does not?

At a single lr, "Post-LN without warmup is stuck" sits on a knife edge (on other seeds it
trains at 3e-3 and 4e-3 and stalls at 5e-3), so at the standard budget the grid also
varies lr, and the robust form of the claim is the largest lr at which each arm
(placement x warmup) still trains.
"""

from __future__ import annotations

from depthlab.config import Config
from depthlab.experiments.analysis import (
    VAL,
    baseline_series,
    by_arm,
    diverged,
    final_values,
    gap_sentence,
    loss_charts,
    per_seed,
)
from depthlab.experiments.baselines import (
    PLATEAU_MARGIN,
    Baselines,
    baselines,
    left_plateau,
    seed_margin,
    seeds_left,
)
from depthlab.experiments.mechanism import collapse_chart, collapse_sentence, input_dependence_chart
from depthlab.experiments.report import BLUE, GREEN, RED, chart, fmt, mean, series
from depthlab.experiments.spec import (
    Budget,
    Experiment,
    Report,
    RunResult,
    RunSpec,
    Seeds,
    specs_over_seeds,
    variant,
)
from depthlab.experiments.wording import Text, joined, phrase, same

ARMS = (("pre", "warmup", GREEN, False), ("pre", "nowarmup", GREEN, True),
        ("post", "warmup", BLUE, False), ("post", "nowarmup", RED, True))

# A learning rate where the difference shows, from scans of 6-layer course models
# (batch 16 x 64 characters, plain 0.02 init, warmup a third of the run, seed 1337):
#   300 steps at 5e-3: Post-LN with warmup 2.03 nats, without warmup stalled at 3.30;
#   300 steps at 3e-3: both Post-LN runs train (2.03 / 2.00): no difference to show;
#   500 steps at 1e-2: Post-LN stalls at 3.27 with and without warmup, Pre-LN trains.
HIGH_LR = 5e-3


def arm_name(placement: str, warmup: str, lr: float, high_lr: float) -> str:
    """The arms at the high lr keep their short names (pre-warmup, post-nowarmup, ...)."""
    return f"{placement}-{warmup}" + ("" if lr == high_lr else f"-lr{lr:g}")


def grid(base: Config, budget: Budget, seeds: Seeds) -> list[RunSpec]:
    """Xiong et al. 2020's setting: plain 0.02 init (as in the 2017 Transformer), half the
    deep stack, a high learning rate; the arms differ in placement and warmup only."""
    warm = max(1, budget.steps // 3)
    common = variant(base, f"model.n_layers={max(2, budget.deep // 2)}", "model.scaled_init=false")
    arms = []
    for lr in budget.lrs:
        for placement in ("pre", "post"):
            for warmup in (warm, 0):
                tag = "warmup" if warmup else "nowarmup"
                arms.append((arm_name(placement, tag, lr, HIGH_LR),
                             f"{placement.capitalize()}-Norm, {'warmup' if warmup else 'no warmup'}"
                             + ("" if lr == HIGH_LR else f", lr {lr:g}"),
                             variant(common, f"model.placement={placement}",
                                     f"train.warmup_steps={warmup}", f"train.lr={lr}")))
    return specs_over_seeds(arms, seeds)


Finals = dict[str, tuple[list[float | None], list[bool]]]  # arm -> final losses, completed


def finals_of(arms: dict[str, list[RunResult]]) -> Finals:
    return {arm: ([r.final_val_loss for r in runs],
                  [bool(r.end and r.end.get("status") == "completed") for r in runs])
            for arm, runs in arms.items()}


def trains(values: list[float | None], completed: list[bool], base: Baselines) -> bool:
    """Every seed completed and the seed mean left the plateau (baselines.left_plateau)."""
    return all(completed) and None not in values and left_plateau(values, base)


def seeds_train(values: list[float | None], completed: list[bool], base: Baselines) -> int:
    """The rule per seed: completed and below the plateau by the seed margin."""
    return seeds_left([v if done else None for v, done in zip(values, completed, strict=True)],
                      base)


def largest_trained_lr(finals: Finals, placement: str, warmup: str, lrs: list[float],
                       high_lr: float, base: Baselines) -> float | None:
    trained = [lr for lr in lrs if trains(*finals[arm_name(placement, warmup, lr, high_lr)], base)]
    return max(trained) if trained else None


def lr_chart(arms: dict[str, list[RunResult]], lrs: list[float], high_lr: float,
             base: Baselines) -> dict:
    x = [1000 * lr for lr in lrs]
    curves = []
    for placement, warmup, color, dash in ARMS:
        values = [[r.final_val_loss for r in arms[arm_name(placement, warmup, lr, high_lr)]]
                  for lr in lrs]
        values = [[v for v in vs if v is not None] or [float("nan")] for vs in values]
        label = f"{placement.capitalize()}-Norm, {'warmup' if warmup == 'warmup' else 'no warmup'}"
        curves.append(series(label, x, [mean(v) for v in values], color, dash,
                             lo=[min(v) for v in values], hi=[max(v) for v in values]))
    curves += baseline_series(x, base)
    return chart("lr", phrase("norm-placement.chart.lr"), phrase("norm-placement.axis.lr"), VAL,
                 curves)


def largest_lr_sentence(finals: Finals, lrs: list[float], high_lr: float,
                        base: Baselines) -> Text:
    """The largest lr at which each arm trains by the rule for the seed mean, and beside
    it every lr where the seeds alone say otherwise (some train, or not all)."""
    best = {(p, w): largest_trained_lr(finals, p, w, lrs, high_lr, base) for p, w, _, _ in ARMS}
    parts = []
    for p, w, _, _ in ARMS:
        notes = []
        for lr in lrs:
            values, completed = finals[arm_name(p, w, lr, high_lr)]
            k, n = seeds_train(values, completed, base), len(values)
            if (0 < k < n) or (k == n) != trains(values, completed, base):
                notes.append(phrase("norm-placement.seeds_at", k=k, n=n, lr=f"{lr:g}"))
        lr = phrase("norm-placement.no_lr") if best[(p, w)] is None else same(f"{best[(p, w)]:g}")
        parts.append(phrase(f"norm-placement.arm_lr.{w}", placement=p.capitalize(), lr=lr)
                     if not notes else phrase(f"norm-placement.arm_lr_seeds.{w}",
                                              placement=p.capitalize(), lr=lr,
                                              seeds=joined(notes, "clause")))
    post_w, post_n = best[("post", "warmup")], best[("post", "nowarmup")]
    if len(lrs) == 1:
        verdict = "one_lr"
    elif (post_w or 0) > (post_n or 0):
        verdict = "warmup_raises"
    else:
        verdict = "warmup_does_not_raise"
    return phrase("norm-placement.largest_lr", lrs=", ".join(f"{lr:g}" for lr in lrs),
                  parts=joined(parts, "clause"), verdict=phrase(f"norm-placement.verdict.{verdict}"),
                  share=f"{PLATEAU_MARGIN:.0%}", margin=f"{seed_margin(base):.3f}")


def reword(export: dict) -> list[Text]:
    """export.json's conclusions with the largest-lr sentence (the first) rendered again
    from its per-seed final losses."""
    base = Baselines(**{k: export["baselines"][k] for k in
                        ("unigram", "bigram", "tokens", "windows", "val_tokens")})
    finals = {arm: (runs["final_val_loss"], runs["completed"])
              for arm, runs in export["per_seed"].items()}
    lrs = sorted(float(f"{x / 1000:.6g}") for x in export_lrs(export))
    out = list(export["conclusions"])
    out[0] = largest_lr_sentence(finals, lrs, HIGH_LR, base)
    return out


def export_lrs(export: dict) -> list[float]:
    """The lr grid of an export, in units of 1e-3 (the lr chart's x; one lr: HIGH_LR)."""
    lr = [c for c in export["charts"] if c["id"] == "lr"]
    return lr[0]["series"][0]["x"] if lr else [1000 * HIGH_LR]


def analyze(results: list[RunResult], budget: Budget) -> Report:
    every = by_arm(results)
    arms = {a: runs for a, runs in every.items() if runs[0].spec.cfg.train.lr == HIGH_LR}
    lrs = sorted({r.spec.cfg.train.lr for r in results})
    style = {f"{p}-{w}": (color, dash) for p, w, color, dash in ARMS}
    base = baselines(results[0].spec.cfg)
    report = Report(charts=loss_charts(arms, style, base), baselines=base.to_json())
    if len(lrs) > 1:
        report.charts.insert(0, lr_chart(every, lrs, HIGH_LR, base))
    collapsed = arms["post-nowarmup"][0]
    post_nowarmup = phrase("norm-placement.name.post_nowarmup")
    report.charts.append(collapse_chart("collapse", collapsed, post_nowarmup))
    report.charts.append(input_dependence_chart("input_dependence", [
        (arms[arm][0].spec.label, arms[arm][0], *style[arm]) for arm in style]))
    finals = finals_of(every)
    report.per_seed = per_seed(every)
    best = {(p, w): largest_trained_lr(finals, p, w, lrs, HIGH_LR, base) for p, w, _, _ in ARMS}
    report.table["columns"] = ["arm", f"final val loss at lr {HIGH_LR:g}", "diverged",
                               f"largest lr that trains (of {', '.join(f'{lr:g}' for lr in lrs)})"]
    for p, w, _, _ in ARMS:
        runs = arms[f"{p}-{w}"]
        report.table["rows"].append([runs[0].spec.label, fmt(final_values(runs)),
                                     "yes" if diverged(runs) else "no",
                                     "none" if best[(p, w)] is None else f"{best[(p, w)]:g}"])
    report.conclusions.append(largest_lr_sentence(finals, lrs, HIGH_LR, base))
    v = {arm: final_values(runs) for arm, runs in arms.items()}
    report.conclusions.append(gap_sentence(
        same("Post-Norm"), v["post-warmup"], v["post-nowarmup"],
        phrase("norm-placement.name.post_warmup"), post_nowarmup))
    report.conclusions.append(gap_sentence(
        phrase("norm-placement.what.without_warmup"), v["pre-nowarmup"], v["post-nowarmup"],
        same("Pre-Norm"), same("Post-Norm")))
    report.conclusions.append(collapse_sentence(collapsed, budget.eval_every, phrase(
        "norm-placement.name.seed", who=post_nowarmup, seed=collapsed.spec.seed)))
    return report


EXPERIMENT = Experiment("norm-placement", ("model.placement", "train.warmup_steps", "train.lr"),
                        grid, analyze, reword)
