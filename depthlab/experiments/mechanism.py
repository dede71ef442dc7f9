"""How a model collapses into a constant predictor, read from its probe lines: the
gradient each block receives, the stream RMS after the last write, and how much the
predictions depend on the input, over training steps (dense early, where it happens).
"""

from __future__ import annotations

import math

from depthlab.experiments.analysis import STEP
from depthlab.experiments.report import ORANGE, chart, series
from depthlab.experiments.spec import RunResult
from depthlab.experiments.wording import Text, phrase

BLOCK_COLORS = ("#08306b", "#2171b5", "#6baed6", "#9ecae1", "#c6dbef")


def block_color(i: int, n: int) -> str:
    """Dark for the bottom block, light for the top one."""
    return BLOCK_COLORS[round(i * (len(BLOCK_COLORS) - 1) / max(1, n - 1))]


def collapse_chart(id: str, run: RunResult, what: Text) -> dict:
    """Per-block gradient norms (bottom dark, top light) and the stream RMS after the
    last write (orange), over steps, on one log axis."""
    probes = run.of("probe")
    steps = [p["step"] for p in probes]
    n = len(probes[0]["grad_params"])
    curves = [series(f"gradient of block {i + 1}", steps, [p["grad_params"][i] for p in probes],
                     block_color(i, n)) for i in range(n)]
    curves.append(series("stream RMS after the last write", steps,
                         [p["resid_rms"][-1] for p in probes], ORANGE, dash=True))
    return chart(id, phrase("collapse.chart", what=what), STEP, phrase("collapse.axis"),
                 curves, y_log=True)


def input_dependence_chart(id: str, runs: list[tuple[str, RunResult, str, bool]]) -> dict:
    """(label, run, color, dash) -> the mean TV distance of the predictions from their
    average, over steps."""
    curves = [series(label, [p["step"] for p in r.of("probe")],
                     [p.get("input_dependence", math.nan) for p in r.of("probe")], color, dash)
              for label, r, color, dash in runs]
    return chart(id, phrase("input_dependence.chart"), STEP, phrase("input_dependence.axis"),
                 curves)


def probe_at(run: RunResult, step: int) -> dict:
    """The probe line at `step`, or the last one before it."""
    probes = [p for p in run.of("probe") if p["step"] <= step]
    return probes[-1]


def collapse_sentence(run: RunResult, step: int, who: Text) -> Text:
    """The collapse in numbers, between step 0 and `step`."""
    a, b = probe_at(run, 0), probe_at(run, step)
    dep = lambda p: p.get("input_dependence", math.nan)
    ratio = lambda p: p["grad_params"][0] / p["grad_params"][-1] if p["grad_params"][-1] else math.inf
    return phrase(
        "collapse.sentence", who=who, step=b["step"], n=len(a["grad_params"]),
        bottom_from=f"{a['grad_params'][0]:.2g}", bottom_to=f"{b['grad_params'][0]:.2g}",
        top_from=f"{a['grad_params'][-1]:.2g}", top_to=f"{b['grad_params'][-1]:.2g}",
        all=" / ".join(f"{v:.2g}" for v in b["grad_params"]),
        ratio_from=f"{ratio(a):.2g}", ratio_to=f"{ratio(b):.2g}",
        rms_from=f"{a['resid_rms'][-1]:.3g}", rms_to=f"{b['resid_rms'][-1]:.3g}",
        dep_from=f"{dep(a):.3f}", dep_to=f"{dep(b):.3f}")
