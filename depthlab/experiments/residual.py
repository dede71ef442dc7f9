"""The residual ablation as a depth sweep: the course model with and without the two
`x +` of each block at 1 to 8 layers (quick) or 1 to 12 (standard). Without the residual
a deep stack becomes a constant predictor within a few dozen steps and stays on the
plateau of the unigram loss; the sweep finds the depth where that starts, and the probe lines show how.
"""

from __future__ import annotations

import math
from itertools import groupby

from depthlab.config import Config
from depthlab.experiments.analysis import (
    VAL,
    baseline_series,
    by_arm,
    final_values,
    loss_charts,
    mean_curve,
    per_seed,
    seed_note,
)
from depthlab.experiments.baselines import (
    PLATEAU_MARGIN,
    Baselines,
    baselines,
    left_plateau,
    plateau_margin,
    seed_margin,
    seeds_left,
)
from depthlab.experiments.mechanism import collapse_chart, collapse_sentence, input_dependence_chart
from depthlab.experiments.report import chart, fmt, mean, series, spread
from depthlab.experiments.spec import (
    Budget,
    Experiment,
    Report,
    RunResult,
    RunSpec,
    Seeds,
    specs_over_seeds,
    variant,
    with_steps,
)
from depthlab.experiments.wording import Text, joined, phrase, same

RESIDUALS = ("plain", "none")
GREENS = ("#a1d99b", "#74c476", "#41ab5d", "#238b45", "#006d2c", "#00441b", "#002910")
REDS = ("#fcae91", "#fb6a4a", "#ef3b2c", "#cb181d", "#a50f15", "#67000d", "#3b0008")


def arm_name(depth: int, residual: str) -> str:
    return f"L{depth}-{residual}"


def grid(base: Config, budget: Budget, seeds: Seeds) -> list[RunSpec]:
    steps = budget.sweep_steps or budget.steps
    arms = []
    for depth in budget.depths:
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


def depth_chart(depths: list[int], finals: dict, base: Baselines, seeds: int) -> dict:
    curves = []
    for res, color, name in (("plain", GREENS[3], "residual"), ("none", REDS[3], "no residual")):
        values = [finals[(d, res)] for d in depths]
        curves.append(series(name, depths, [mean(v) for v in values], color,
                             lo=[min(v) for v in values], hi=[max(v) for v in values]))
    curves += baseline_series(depths, base)
    count = phrase("count.seeds" if seeds > 1 else "count.seed", n=seeds)
    return chart("depth", phrase("residual.chart.depth", seeds=count),
                 phrase("residual.axis.layers"), VAL, curves)


def _span(values: list[float]) -> Text:
    lo, hi = min(values), max(values)
    if math.isclose(lo, hi, abs_tol=5e-5):
        return same(f"{lo:+.4f}")
    return phrase("residual.span.range", lo=f"{lo:+.4f}", hi=f"{hi:+.4f}")


def analyze(results: list[RunResult], budget: Budget) -> Report:
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

    collapse_depth = budget.shallow if budget.shallow in depths else depths[-1]
    collapsed = arms[arm_name(collapse_depth, "none")][0]
    report.charts.append(collapse_chart("collapse", collapsed, phrase(
        "residual.name.collapsed", layers=collapse_depth)))
    report.charts.append(input_dependence_chart("input_dependence", [
        (arms[arm_name(d, "none")][0].spec.label, arms[arm_name(d, "none")][0],
         REDS[i % len(REDS)], False) for i, d in enumerate(depths)] + [
        (arms[arm_name(collapse_depth, "plain")][0].spec.label,
         arms[arm_name(collapse_depth, "plain")][0], GREENS[3], True)]))

    depth_table(report, arms, depths, finals, base)
    report.per_seed = per_seed(arms)
    report.conclusions += rule_sentences(depths, finals, base, budget.sweep_steps or budget.steps)
    report.conclusions.append(collapse_sentence(collapsed, budget.eval_every, phrase(
        "residual.name.collapsed_seed", layers=collapse_depth, seed=collapsed.spec.seed)))
    report.conclusions.append(phrase(
        "residual.scored_on", tokens=f"{base.tokens:,}", windows=base.windows,
        val_tokens=f"{base.val_tokens:,}"))
    return report


RULE_SENTENCES = slice(0, 3)  # the conclusions rule_sentences writes, first in the list


def rule_sentences(depths: list[int], finals: dict, base: Baselines, steps: int) -> list[Text]:
    """The conclusions that come from the final losses alone: how the gap grows, which
    depths leave the plateau (per seed and seed mean), where the stuck ones end."""
    gaps = {d: mean(finals[(d, "none")]) - mean(finals[(d, "plain")]) for d in depths}
    noise = {d: spread(finals[(d, "plain")]) + spread(finals[(d, "none")]) for d in depths}
    left = {d: left_plateau(finals[(d, "none")], base) for d in depths}
    seeds = min(len(v) for v in finals.values())
    return [_gap_growth(depths, gaps, noise, seeds), _plateau(depths, finals, base, steps),
            _unigram_level(depths, left, finals, base, seeds)]


def reword(export: dict) -> list[Text]:
    """export.json's conclusions with the rule sentences rendered again from its
    per-seed final losses (what tests/test_readme_results.py checks the README by)."""
    base = Baselines(**{k: export["baselines"][k] for k in
                        ("unigram", "bigram", "tokens", "windows", "val_tokens")})
    finals, steps = {}, set()
    for arm, runs in export["per_seed"].items():
        depth, res = arm[1:].split("-", 1)
        finals[(int(depth), res)] = runs["final_val_loss"]
        steps.add(runs["steps"])
    depths = sorted({d for d, _ in finals})
    out = list(export["conclusions"])
    out[RULE_SENTENCES] = rule_sentences(depths, finals, base, steps.pop())
    return out


def depth_table(report: Report, arms: dict[str, list[RunResult]], depths: list[int],
                finals: dict, base: Baselines) -> None:
    """The table rows per depth and residual."""
    report.table["columns"] = ["layers", "residual", "final val loss", "gap (none - residual)",
                               "input dependence at the end", "below the plateau from step"]
    for d in depths:
        with_res, without = finals[(d, "plain")], finals[(d, "none")]
        gap = mean(without) - mean(with_res)
        for res, values in (("plain", with_res), ("none", without)):
            runs = arms[arm_name(d, res)]
            dep = mean([r.of("probe")[-1].get("input_dependence", math.nan) for r in runs])
            step = escape_step(runs, base)
            report.table["rows"].append([
                d, res, fmt(values), f"{gap:+.4f}" if res == "none" else "", f"{dep:.3f}",
                "never" if step is None else step])
    report.table["rows"].append(["-", "unigram baseline", f"{base.unigram:.4f}", "", "0", ""])
    report.table["rows"].append(["-", "bigram baseline", f"{base.bigram:.4f}", "", "", ""])


def _gap_growth(depths: list[int], gaps: dict, noise: dict, seeds: int) -> Text:
    listed = joined([phrase("residual.gap.at", gap=f"{gaps[d]:+.3f}", depth=d) for d in depths],
                    "clause")
    first, last = depths[0], depths[-1]
    note = seed_note(seeds, noise[first] + noise[last])
    if gaps[last] - gaps[first] > noise[first] + noise[last]:
        return phrase("residual.gap.grows", listed=listed, note=note,
                      where=_where_it_grows(depths, gaps))
    return phrase("residual.gap.flat", first=first, last=last, listed=listed, note=note)


def _where_it_grows(depths: list[int], gaps: dict) -> Text:
    """The largest step between neighbouring depths, and the range of the gap after it."""
    _, a, b = max((gaps[y] - gaps[x], x, y) for x, y in zip(depths, depths[1:], strict=False))
    after = [gaps[d] for d in depths if d >= b]
    where = {"a": a, "b": b, "gap_a": f"{gaps[a]:+.3f}", "gap_b": f"{gaps[b]:+.3f}"}
    if len(after) > 1:
        return phrase("residual.gap.where_after", **where, last=depths[-1],
                      low=f"{min(after):+.3f}", high=f"{max(after):+.3f}")
    return phrase("residual.gap.where", **where)


def plateau_rule(base: Baselines) -> Text:
    """The rule exactly as baselines.seeds_left and left_plateau apply it."""
    return phrase("residual.plateau.rule", share=f"{PLATEAU_MARGIN:.0%}",
                  margin=f"{seed_margin(base):.3f}")


def _leaving(values: list[float], base: Baselines) -> str:
    """'all': every seed and the seed mean leave the plateau; 'none': no seed does;
    'split': the seeds differ, or the mean disagrees with them."""
    k = seeds_left(values, base)
    if k == len(values) and left_plateau(values, base):
        return "all"
    return "none" if k == 0 else "split"


def _plateau(depths: list[int], finals: dict, base: Baselines, steps: int) -> Text:
    """Which depths without residual leave the plateau, by the rule applied to each seed
    and to the seed mean: runs of neighbouring depths where every seed and the mean leave,
    or where no seed does; a depth whose seeds split, by itself."""
    kinds = {d: _leaving(finals[(d, "none")], base) for d in depths}
    runs = groupby(depths, key=lambda d: kinds[d] if kinds[d] != "split" else d)
    parts = []
    for _, grouped in runs:
        group = list(grouped)
        values = finals[(group[0], "none")]
        n, kind = len(values), kinds[group[0]]
        layers = phrase("residual.plateau." + ("layer" if group == [1] else "layers"))
        if kind == "none" and group[-1] == depths[-1] and group[0] != depths[0]:
            parts.append(phrase("residual.plateau.none_from", stuck=group[0], n=n))
        elif kind in ("all", "none"):
            parts.append(phrase(f"residual.plateau.{kind}" + ("_at" if kind == "none" else ""),
                                depths=_numbers(group), n=n, layers=layers))
        else:
            leaves = left_plateau(values, base)
            parts.append(phrase("residual.plateau.split_" + ("leaves" if leaves else "stays"),
                                depth=group[0], layers=layers, k=seeds_left(values, base), n=n,
                                diff=f"{mean(values) - base.unigram:+.3f}",
                                spread=f"{spread(values):.3f}"))
    return phrase("residual.plateau.per_seed", steps=steps, parts=joined(parts, "clauses"),
                  rule=plateau_rule(base))


def _unigram_level(depths: list[int], left: dict, finals: dict, base: Baselines,
                   seeds: int) -> Text:
    """Where each stuck depth ends against the unigram baseline of the same tokens: at
    it (within its seed spread), or above or below it beyond that spread."""
    stuck = [d for d in depths if not left[d]]
    if not stuck:
        return phrase("residual.unigram.none_stuck")
    diffs = {d: mean(finals[(d, "none")]) - base.unigram for d in stuck}
    if seeds < 2:
        return phrase("residual.unigram.level", depths=_numbers(stuck),
                      unigram=f"{base.unigram:.4f}", parts=phrase(
                          "residual.unigram.one_seed", span=_span(list(diffs.values()))))
    groups: dict[str, list[int]] = {"at": [], "above": [], "below": []}
    for d, x in diffs.items():
        noise = spread(finals[(d, "none")])
        groups["at" if abs(x) <= noise else "above" if x > 0 else "below"].append(d)
    # a depth whose mean is at the level while some of its seeds alone are below it says so
    split = [d for d in groups["at"] if seeds_left(finals[(d, "none")], base)]
    groups["at"] = [d for d in groups["at"] if d not in split]
    parts = [phrase(f"residual.unigram.{where}", depths=_numbers(ds),
                    span=_span([diffs[d] for d in ds]),
                    spread=f"{max(spread(finals[(d, 'none')]) for d in ds):.4f}")
             for where, ds in groups.items() if ds]
    parts[:0] = [phrase("residual.unigram.at_split", depth=d, span=_span([diffs[d]]),
                        spread=f"{spread(finals[(d, 'none')]):.4f}",
                        k=seeds_left(finals[(d, "none")], base), n=len(finals[(d, "none")]),
                        margin=f"{seed_margin(base):.3f}") for d in split]
    return phrase("residual.unigram.level", depths=_numbers(stuck),
                  unigram=f"{base.unigram:.4f}", parts=joined(parts, "clauses"))


def _numbers(values: list[int]) -> Text:
    return joined([same(str(v)) for v in values])


EXPERIMENT = Experiment("residual", ("model.residual", "model.n_layers"), grid, analyze, reword)
