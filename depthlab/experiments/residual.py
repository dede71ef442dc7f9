"""The residual ablation as a depth sweep: the course model with and without the two
`x +` of each block at 1 to 12 layers. Without the residual a deep stack becomes a
constant predictor within a few dozen steps and stays on the plateau of the unigram
loss; the sweep finds the depth where that starts, and the probe lines show how.
"""

from __future__ import annotations

import math

from depthlab.config import Config
from depthlab.experiments.baselines import (
    PLATEAU_MARGIN,
    Baselines,
    baselines,
    left_plateau,
    plateau_margin,
)
from depthlab.experiments.catalog import (
    VAL,
    by_arm,
    final_values,
    loss_charts,
    mean_curve,
    specs_over_seeds,
)
from depthlab.experiments.mechanism import collapse_chart, collapse_sentence, input_dependence_chart
from depthlab.experiments.report import GREY, ORANGE, chart, fmt, mean, series, spread, text
from depthlab.experiments.spec import Budget, Report, RunResult, RunSpec, variant, with_steps

RESIDUALS = ("plain", "none")
GREENS = ("#a1d99b", "#74c476", "#41ab5d", "#238b45", "#006d2c", "#00441b", "#002910")
REDS = ("#fcae91", "#fb6a4a", "#ef3b2c", "#cb181d", "#a50f15", "#67000d", "#3b0008")


def arm_name(depth: int, residual: str) -> str:
    return f"L{depth}-{residual}"


def grid(base: Config, b: Budget, seeds: int) -> list[RunSpec]:
    steps = b.sweep_steps or b.steps
    arms = []
    for depth in b.depths:
        for res in RESIDUALS:
            label = f"{depth} layer{'s' if depth > 1 else ''}, " + (
                "residual" if res == "plain" else "no residual")
            cfg = variant(base, f"model.n_layers={depth}", f"model.residual={res}")
            arms.append((arm_name(depth, res), label, with_steps(cfg, steps)))
    return specs_over_seeds(arms, seeds)


def escape_step(runs: list[RunResult], base: Baselines) -> int | None:
    """The first evaluated step at which the seed-mean loss is below the plateau."""
    margin = plateau_margin(final_values(runs), base)
    steps, values = mean_curve(runs, "eval", "val_loss")
    return next((s for s, v in zip(steps, values, strict=True) if v < base.unigram - margin),
                None)


def plateau_depth(depths: list[int], left: dict[int, bool]) -> int | None:
    """The smallest depth from which on no model without residual leaves the plateau."""
    stuck_from = None
    for d in reversed(depths):
        if left[d]:
            break
        stuck_from = d
    return stuck_from


def depth_chart(depths: list[int], finals: dict, base: Baselines, seeds: int) -> dict:
    curves = []
    for res, color, name in (("plain", GREENS[3], "residual"), ("none", REDS[3], "no residual")):
        values = [finals[(d, res)] for d in depths]
        curves.append(series(name, depths, [mean(v) for v in values], color,
                             lo=[min(v) for v in values], hi=[max(v) for v in values]))
    curves.append(series(f"unigram baseline ({base.unigram:.4f})", depths,
                         [base.unigram] * len(depths), GREY, dash=True))
    curves.append(series(f"bigram baseline ({base.bigram:.4f})", depths,
                         [base.bigram] * len(depths), ORANGE, dash=True))
    return chart("depth", text(f"Final validation loss against depth ({seeds} seed"
                               f"{'s' if seeds > 1 else ''}; band: min-max over seeds)",
                               f"最终验证损失与深度({seeds} 个种子;色带:种子间最小到最大)"),
                 text("layers", "层数"), VAL, curves)


def _span(values: list[float], to: str = " to ") -> str:
    lo, hi = min(values), max(values)
    return f"{lo:+.4f}" if math.isclose(lo, hi, abs_tol=5e-5) else f"{lo:+.4f}{to}{hi:+.4f}"


def analyze(results: list[RunResult], b: Budget) -> Report:
    arms = by_arm(results)
    base = baselines(results[0].spec.cfg)
    depths = sorted({r.spec.cfg.model.n_layers for r in results})
    seeds = min(len(runs) for runs in arms.values())
    finals = {(d, res): final_values(arms[arm_name(d, res)]) for d in depths for res in RESIDUALS}
    style = {arm_name(d, "plain"): (GREENS[i % len(GREENS)], True) for i, d in enumerate(depths)}
    style |= {arm_name(d, "none"): (REDS[i % len(REDS)], False) for i, d in enumerate(depths)}
    report = Report(baselines=base.to_json())
    report.charts.append(depth_chart(depths, finals, base, seeds))
    report.charts += loss_charts(arms, style, base)

    collapse_depth = b.shallow if b.shallow in depths else depths[-1]
    collapsed = arms[arm_name(collapse_depth, "none")][0]
    report.charts.append(collapse_chart("collapse", collapsed,
                                         f"the {collapse_depth}-layer model without residual",
                                         f"去掉残差的 {collapse_depth} 层模型"))
    report.charts.append(input_dependence_chart("input_dependence", [
        (arms[arm_name(d, "none")][0].spec.label, arms[arm_name(d, "none")][0],
         REDS[i % len(REDS)], False) for i, d in enumerate(depths)] + [
        (arms[arm_name(collapse_depth, "plain")][0].spec.label,
         arms[arm_name(collapse_depth, "plain")][0], GREENS[3], True)]))

    report.table["columns"] = ["layers", "residual", "final val loss", "gap (none - residual)",
                               "input dependence at the end", "below the plateau from step"]
    left, gaps, noise = {}, {}, {}
    for d in depths:
        with_res, without = finals[(d, "plain")], finals[(d, "none")]
        gaps[d] = mean(without) - mean(with_res)
        noise[d] = spread(with_res) + spread(without)
        left[d] = left_plateau(without, base)
        for res, values in (("plain", with_res), ("none", without)):
            runs = arms[arm_name(d, res)]
            dep = mean([r.of("probe")[-1].get("input_dependence", math.nan) for r in runs])
            step = escape_step(runs, base)
            report.table["rows"].append([
                d, res, fmt(values), f"{gaps[d]:+.4f}" if res == "none" else "", f"{dep:.3f}",
                "never" if step is None else step])
    n = base.tokens
    report.table["rows"].append(["-", "unigram baseline", f"{base.unigram:.4f}", "", "0", ""])
    report.table["rows"].append(["-", "bigram baseline", f"{base.bigram:.4f}", "", "", ""])

    report.conclusions.append(_gap_growth(depths, gaps, noise, seeds))
    report.conclusions.append(_plateau(depths, left, base, b))
    report.conclusions.append(_unigram_level(depths, left, finals, base, seeds))
    report.conclusions.append(collapse_sentence(
        collapsed, b.eval_every, f"Without residual at {collapse_depth} layers (seed "
        f"{collapsed.spec.seed})", f"去掉残差的 {collapse_depth} 层模型(种子 {collapsed.spec.seed})"))
    report.conclusions.append(text(
        f"Validation losses and both baselines are scored on the same {n:,} tokens: "
        f"{base.windows} windows spread evenly over the whole validation split "
        f"({base.val_tokens:,} tokens).",
        f"验证损失与两条基线在同一组 {n:,} 个 token 上计算:{base.windows} 个窗口均匀分布在整个验证集"
        f"({base.val_tokens:,} 个 token)上。"))
    return report


def _gap_growth(depths: list[int], gaps: dict, noise: dict, seeds: int) -> dict[str, str]:
    listed = ", ".join(f"{gaps[d]:+.3f} at {d}" for d in depths)
    listed_zh = ",".join(f"{d} 层 {gaps[d]:+.3f}" for d in depths)
    first, last = depths[0], depths[-1]
    note = "1 seed, spread not measured" if seeds < 2 else (
        f"{seeds} seeds, spread ±{noise[first] + noise[last]:.4f}")
    if gaps[last] - gaps[first] > noise[first] + noise[last]:
        # Where it grows: the largest step between neighbouring depths, and the range after it.
        _, a, b = max((gaps[y] - gaps[x], x, y) for x, y in zip(depths, depths[1:], strict=False))
        after = [gaps[d] for d in depths if d >= b]
        where = f" Most of it comes between {a} and {b} layers ({gaps[a]:+.3f} -> {gaps[b]:+.3f})"
        where_zh = f"主要发生在 {a} 层到 {b} 层之间({gaps[a]:+.3f} → {gaps[b]:+.3f})"
        if len(after) > 1:
            low, high = min(after), max(after)
            where += f"; from {b} to {last} layers it stays between {low:+.3f} and {high:+.3f}"
            where_zh += f";从 {b} 层到 {last} 层保持在 {low:+.3f} 到 {high:+.3f} 之间"
        return text(f"The gap (without minus with residual) grows with depth: {listed} layers "
                    f"({note}).{where}.",
                    f"差距(无残差减有残差)随深度变大:{listed_zh}。{where_zh}。")
    return text(f"The gap does not grow beyond the seed spread from {first} to {last} layers: "
                f"{listed} layers ({note}).",
                f"从 {first} 层到 {last} 层,差距没有超出种子波动地变大:{listed_zh}。")


def _plateau(depths: list[int], left: dict, base: Baselines, b: Budget) -> dict[str, str]:
    margin = PLATEAU_MARGIN * (base.unigram - base.bigram)
    rule = (f"below the unigram baseline by more than the seed spread and more than "
            f"{PLATEAU_MARGIN:.0%} of the unigram-bigram distance ({margin:.3f} nats)")
    rule_zh = f"比一元基线低出种子波动以上且超过一元与二元基线之差的 {PLATEAU_MARGIN:.0%}({margin:.3f} nats)"
    stuck = plateau_depth(depths, left)
    steps = b.sweep_steps or b.steps
    if stuck is None:
        return text(f"Every depth without residual leaves the plateau in {steps} steps ({rule}).",
                    f"{steps} 步内,每个深度的无残差模型都离开了平台({rule_zh})。")
    if stuck == depths[0]:
        return text(f"Without residual, not even {stuck} layer leaves the plateau in {steps} "
                    f"steps ({rule}).", f"{steps} 步内,去掉残差后连 {stuck} 层也没有离开平台({rule_zh})。")
    escaped = [d for d in depths if d < stuck and left[d]]
    return text(
        f"Without residual, {', '.join(map(str, escaped))} layer{'s' if len(escaped) > 1 else ''} "
        f"leave{'s' if len(escaped) == 1 else ''} the plateau and from {stuck} layers on no model "
        f"does in {steps} steps (leaving: ending {rule}); from there on the gap changes only "
        "with the residual model's loss.",
        f"去掉残差后,{'、'.join(map(str, escaped))} 层离开了平台,从 {stuck} 层起 {steps} 步内都没有离开"
        f"(离开:最终{rule_zh});此后差距的变化只来自有残差的模型。")


def _unigram_level(depths: list[int], left: dict, finals: dict, base: Baselines,
                   seeds: int) -> dict[str, str]:
    stuck = [d for d in depths if not left[d]]
    if not stuck:
        return text("No model without residual ends on the plateau.", "没有哪个无残差模型停在平台上。")
    diffs = [mean(finals[(d, "none")]) - base.unigram for d in stuck]
    within = [d for d, x in zip(stuck, diffs, strict=True)
              if seeds >= 2 and abs(x) <= spread(finals[(d, "none")])]
    names = ", ".join(map(str, stuck))
    if seeds < 2:
        verdict = ("one seed, so no spread to call any of them at the unigram level",
                   "只有一个种子,没有波动可依,不称其为一元水平")
    elif within:
        verdict = (f"within the seed spread of it, i.e. at the unigram level: "
                   f"{', '.join(map(str, within))} layers",
                   f"在种子波动之内、即处于一元水平的:{'、'.join(map(str, within))} 层")
    else:
        verdict = ("none within its seed spread of it, so none is called at the unigram level",
                   "都不在种子波动之内,不称其为一元水平")
    return text(f"Without residual, {names} layers end {_span(diffs)} nats from the unigram "
                f"baseline of the same tokens ({base.unigram:.4f}); {verdict[0]}.",
                f"去掉残差后,{'、'.join(map(str, stuck))} 层最终与同一批 token 的一元基线"
                f"({base.unigram:.4f})相差 {_span(diffs, ' 到 ')} nats;{verdict[1]}。")
