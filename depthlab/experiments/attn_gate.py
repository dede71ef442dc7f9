"""attn-gate: a sigmoid gate on the attention output, against none: the loss, and the
share of attention the first token draws (an attention sink), per layer, beside
SmolLM2-135M measured the same way (depthlab.experiments.sink)."""

from __future__ import annotations

from depthlab.config import Config
from depthlab.experiments.analysis import by_arm, final_values, gap_sentence, loss_charts
from depthlab.experiments.baselines import Baselines, baselines
from depthlab.experiments.report import (
    BLUE,
    GREEN,
    GREY,
    ORANGE,
    RED,
    chart,
    compare,
    fmt,
    mean,
    series,
    spread,
)
from depthlab.experiments.sink import (
    REAL_CACHE,
    SINK_RATIO,
    WINDOWS,
    Profile,
    is_sink,
    run_profile,
    smollm2_profiles,
)
from depthlab.experiments.spec import (
    Budget,
    Experiment,
    Report,
    RunResult,
    RunSpec,
    Seeds,
    base_config,
    specs_over_seeds,
    variant,
    with_steps,
)
from depthlab.experiments.wording import Text, joined, phrase, same

WIDE = ("wide-no-gate", "wide-gate")  # the pair of Budget.wide, beside the course-scale one


def grid(base: Config, budget: Budget, seeds: Seeds) -> list[RunSpec]:
    """The course model with and without the gate; where the budget names one, the same
    pair wider and longer (Budget.wide), to see whether a sink forms at all on a CPU."""
    arms = [("no-gate", "no gate", base),
            ("gate", "sigmoid output gate", variant(base, "model.attn_gate=true"))]
    if budget.wide:
        wide = wide_config(base, budget)
        shape = (f"d {wide.model.d_model}, context {wide.train.seq_len}, "
                 f"{wide.train.steps} steps")
        arms += [(WIDE[0], f"no gate, {shape}", wide),
                 (WIDE[1], f"sigmoid output gate, {shape}",
                  variant(wide, "model.attn_gate=true"))]
    return specs_over_seeds(arms, seeds)


def wide_config(base: Config, budget: Budget) -> Config:
    return with_steps(variant(base, *budget.wide), budget.wide_steps)


def wide_summary(budget: Budget) -> str:
    """The wide pair's shape for `depthlab experiment --list` ("-" where there is none)."""
    if not budget.wide:
        return "-"
    cfg = wide_config(base_config(budget), budget)
    return (f"d {cfg.model.d_model}, {cfg.train.batch_size} x {cfg.train.seq_len} "
            f"@ {cfg.train.steps}")


PAIRS = (("no-gate", "gate"), WIDE)
STYLE = {"no-gate": (BLUE, False), "gate": (GREEN, False), "wide-no-gate": (BLUE, True),
         "wide-gate": (GREEN, True)}
REAL_COLOR = RED


def analyze(results: list[RunResult], budget: Budget) -> Report:
    arms = by_arm(results)
    base = baselines(results[0].spec.cfg)
    report = Report(charts=pair_loss_charts(arms, base), baselines=base.to_json())
    report.table["columns"] = ["arm", "final val loss", "attention on first token",
                               "uniform baseline H_T/T", "share / uniform"]
    profiles = {arm: [run_profile(r.run_dir) for r in runs] for arm, runs in arms.items()}
    for arm, runs in arms.items():
        shares = [p.share for p in profiles[arm]]
        uniform = profiles[arm][0].uniform
        report.table["rows"].append([runs[0].spec.label, fmt(final_values(runs)),
                                     f"{_percent(shares)}%", f"{100 * uniform:.1f}%",
                                     f"{mean(shares) / uniform:.2f}"])
    pairs = [pair for pair in PAIRS if all(arm in arms for arm in pair)]
    for no, yes in pairs:
        report.conclusions.append(gap_sentence(
            phrase("attn-gate.what.val_loss", shape=_shape(arms[no][0])),
            final_values(arms[no]), final_values(arms[yes]),
            phrase("attn-gate.name.ungated"), phrase("attn-gate.name.gated")))
        report.conclusions.append(sink_sentence(_shape(arms[no][0]), profiles[no],
                                                profiles[yes]))
    real: dict[int, Profile] = {}
    if budget.real_model:
        root = results[0].run_dir.parents[1]
        lengths = sorted({p[0].tokens for p in profiles.values()})
        found = smollm2_profiles(root.parent, results[0].spec.cfg.data, lengths,
                                 root / REAL_CACHE)
        if isinstance(found, dict):
            real = found
            for t, prof in real.items():
                report.table["rows"].append([f"SmolLM2-135M, {t} tokens", "",
                                             f"{100 * prof.share:.1f}%",
                                             f"{100 * prof.uniform:.1f}%", f"{prof.ratio:.2f}"])
                report.conclusions.append(real_sentence(prof))
        else:
            report.conclusions.append(found)
    else:
        report.conclusions.append(phrase("attn-gate.real.skipped", budget=budget.name))
    report.charts.append(layer_chart(arms, profiles, real))
    return report


def pair_loss_charts(arms: dict[str, list[RunResult]], base: Baselines) -> list[dict]:
    """Loss charts of the course pair against the baselines of its tokens, then the wide
    pair's against the baselines of its own (longer) evaluation windows."""
    small = {arm: runs for arm, runs in arms.items() if arm not in WIDE}
    charts = loss_charts(small, STYLE, base)
    wide = {arm: runs for arm, runs in arms.items() if arm in WIDE}
    if wide:
        shape = _shape(next(iter(wide.values()))[0])
        for c in loss_charts(wide, STYLE, baselines(next(iter(wide.values()))[0].spec.cfg)):
            c["id"] = "wide_" + c["id"]
            c["title"] = phrase("attn-gate.chart.wide", chart=c["title"], shape=shape)
            charts.append(c)
    return charts


def _shape(run: RunResult) -> Text:
    cfg = run.spec.cfg
    return phrase("attn-gate.shape", d=cfg.model.d_model, tokens=cfg.train.seq_len,
                  steps=cfg.train.steps)


def _percent(shares: list[float]) -> str:
    """Mean share in percent, with the seed spread where there are seeds to spread."""
    if len(shares) > 1:
        return f"{100 * mean(shares):.2f} ± {100 * spread(shares):.2f}"
    return f"{100 * mean(shares):.2f}"


def sink_sentence(shape: Text, ungated: list[Profile], gated: list[Profile]) -> Text:
    """The share with and without the gate (one profile per seed) against uniform
    attention, and per layer; a sink is claimed above SINK_RATIO x uniform, a change by
    the gate only beyond the seed spread."""
    ref = ungated[0]
    no, yes = [p.share for p in ungated], [p.share for p in gated]
    ratio = mean(no) / ref.uniform
    if is_sink(mean(no), ref.uniform):
        verdict = phrase("attn-gate.sink", ratio=f"{ratio:.2f}", threshold=f"{SINK_RATIO:g}")
    else:
        verdict = phrase("attn-gate.no_sink", ratio=f"{ratio:.2f}", relation=phrase(
            "attn-gate." + ("below" if ratio < 1 else "under_twice"),
            threshold=f"{SINK_RATIO:g}"))
    over = [same(str(i)) for i, r in enumerate(_mean_layers(ungated)) if r > SINK_RATIO]
    layers = (phrase("attn-gate.layers_over", layers=joined(over), threshold=f"{SINK_RATIO:g}")
              if over else phrase("attn-gate.no_layer_over", threshold=f"{SINK_RATIO:g}"))
    gap, real = compare(no, yes)
    noise = spread(no) + spread(yes)  # in points, as the gap
    note = (phrase("note.seeds", seeds=min(len(no), len(yes)), spread=f"{100 * noise:.2f}")
            if min(len(no), len(yes)) > 1 else phrase("note.one_seed"))
    gate = phrase("attn-gate.gate." + ("changes" if real else "within"),
                  gap=f"{100 * gap:+.2f}", note=note)
    return phrase("attn-gate.share", shape=shape, ungated=_percent(no), gated=_percent(yes),
                  uniform=f"{100 * ref.uniform:.1f}", tokens=ref.tokens, verdict=verdict,
                  layers=layers, gate=gate, per_layer=_layer_ratios(ungated),
                  per_layer_gated=_layer_ratios(gated))


def _mean_layers(profiles: list[Profile]) -> list[float]:
    """Seed-mean share per layer as a multiple of uniform, first layer first."""
    per_layer = zip(*[[v / p.uniform for v in p.layers] for p in profiles], strict=True)
    return [mean(list(v)) for v in per_layer]


def _layer_ratios(profiles: list[Profile]) -> str:
    return " / ".join(f"{r:.2f}" for r in _mean_layers(profiles))


def real_sentence(prof: Profile) -> Text:
    """SmolLM2's share and where along its depth the sink sits."""
    sinks = [i for i, v in enumerate(prof.layers) if is_sink(v, prof.uniform)]
    low = min(range(len(prof.layers)), key=prof.layers.__getitem__)
    high = max(range(len(prof.layers)), key=prof.layers.__getitem__)
    return phrase(
        "attn-gate.real.share", windows=WINDOWS, tokens=prof.tokens,
        share=f"{100 * prof.share:.1f}", uniform=f"{100 * prof.uniform:.1f}", ratio=f"{prof.ratio:.1f}",
        n_sink=len(sinks), layers=len(prof.layers), threshold=f"{SINK_RATIO:g}",
        first=sinks[0] if sinks else "-", low=f"{100 * prof.layers[low]:.1f}", low_at=low,
        high=f"{100 * prof.layers[high]:.1f}", high_at=high)


def layer_chart(arms: dict[str, list[RunResult]], profiles: dict[str, list[Profile]],
                real: dict[int, Profile]) -> dict:
    """First-token share per layer as a multiple of uniform attention (so windows of
    different lengths compare), seed means with their range; 1 = uniform, 2 = a sink."""
    lines = []
    for arm, runs in arms.items():
        ratios = [[v / p.uniform for v in p.layers] for p in profiles[arm]]
        layers = list(range(len(ratios[0])))
        color, dash = STYLE.get(arm, (None, False))
        lines.append(series(runs[0].spec.label, layers,
                            [mean(list(v)) for v in zip(*ratios, strict=True)], color, dash,
                            lo=[min(v) for v in zip(*ratios, strict=True)],
                            hi=[max(v) for v in zip(*ratios, strict=True)]))
    for t, prof in real.items():
        lines.append(series(f"SmolLM2-135M, {t} tokens", list(range(len(prof.layers))),
                            [v / prof.uniform for v in prof.layers], REAL_COLOR, t != max(real)))
    end = max(len(s["x"]) for s in lines) - 1
    lines.append(series("uniform causal attention (H_T/T)", [0, end], [1.0, 1.0], GREY, True))
    lines.append(series(f"sink threshold ({SINK_RATIO:g}x uniform)", [0, end],
                        [SINK_RATIO, SINK_RATIO], ORANGE, True))
    return chart("first_token", phrase("attn-gate.chart.first_token"),
                 phrase("attn-gate.axis.layer"), phrase("attn-gate.axis.ratio"), lines,
                 y_log=True)


EXPERIMENT = Experiment("attn-gate", (
    "model.attn_gate", "model.d_model", "train.seq_len", "train.batch_size", "train.steps",
    "train.ckpt_every", "train.warmup_steps"), grid, analyze)
