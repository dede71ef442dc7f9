"""The report of residual-frontier, from the runs' metric logs and the measurements: its
table, charts and sentences (templates in locales/*/frontier.json), and the data the
page's "beyond" section draws (frontier.json). Pure, so tests feed it synthetic logs.
"""

from __future__ import annotations

import math

from depthlab.experiments.analysis import VAL, by_arm, final_values, loss_charts, mean_curve
from depthlab.experiments.baselines import Baselines, left_plateau, plateau_margin
from depthlab.experiments.frontier_arms import (
    ARM_BY_NAME,
    ARM_NAMES,
    C8_PAIR,
    REFERENCE,
    arm_name,
    split_arm,
)
from depthlab.experiments.frontier_readings import complete
from depthlab.experiments.report import GREY, ORANGE, chart, fmt, mean, series, spread
from depthlab.experiments.spec import (
    Report,
    RunResult,
)
from depthlab.locales import text, texts


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
    the benchmark and the learned mixing matrices / depth weights, with the page's readings
    of them (depthlab.experiments.frontier_readings)."""
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
    return complete(out)
