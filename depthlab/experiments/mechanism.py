"""How a model collapses into a constant predictor, read from its probe lines: the
gradient each block receives, the stream RMS after the last write, and how much the
predictions depend on the input, over training steps (dense early, where it happens).
"""

from __future__ import annotations

import math

from depthlab.experiments.report import ORANGE, chart, series, text
from depthlab.experiments.spec import RunResult

BLOCK_COLORS = ("#08306b", "#2171b5", "#6baed6", "#9ecae1", "#c6dbef")
STEP = text("training step", "训练步数")


def block_color(i: int, n: int) -> str:
    """Dark for the bottom block, light for the top one."""
    return BLOCK_COLORS[round(i * (len(BLOCK_COLORS) - 1) / max(1, n - 1))]


def collapse_chart(id: str, run: RunResult, what: str, what_zh: str) -> dict:
    """Per-block gradient norms (bottom dark, top light) and the stream RMS after the
    last write (orange), over steps, on one log axis."""
    probes = run.of("probe")
    steps = [p["step"] for p in probes]
    n = len(probes[0]["grad_params"])
    curves = [series(f"gradient of block {i + 1}", steps, [p["grad_params"][i] for p in probes],
                     block_color(i, n)) for i in range(n)]
    curves.append(series("stream RMS after the last write", steps,
                         [p["resid_rms"][-1] for p in probes], ORANGE, dash=True))
    return chart(id, text(f"How {what} collapses: gradients per block and the top write",
                          f"{what_zh}如何塌缩:每块的梯度与最后一次写入"),
                 STEP, text("gradient norm / RMS (log scale)", "梯度范数 / RMS(对数坐标)"),
                 curves, y_log=True)


def input_dependence_chart(id: str, runs: list[tuple[str, RunResult, str, bool]]) -> dict:
    """(label, run, color, dash) -> the mean TV distance of the predictions from their
    average, over steps."""
    curves = [series(label, [p["step"] for p in r.of("probe")],
                     [p.get("input_dependence", math.nan) for p in r.of("probe")], color, dash)
              for label, r, color, dash in runs]
    return chart(id, text("How much the prediction depends on the input",
                          "预测在多大程度上取决于输入"), STEP,
                 text("mean TV distance of the predictions from their average",
                      "各位置预测分布与平均分布的总变差距离(均值)"), curves)


def probe_at(run: RunResult, step: int) -> dict:
    """The probe line at `step`, or the last one before it."""
    probes = [p for p in run.of("probe") if p["step"] <= step]
    return probes[-1]


def collapse_sentence(run: RunResult, step: int, who: str, who_zh: str) -> dict[str, str]:
    """The collapse in numbers, between step 0 and `step`."""
    a, b = probe_at(run, 0), probe_at(run, step)
    n = len(a["grad_params"])
    g = lambda p: " / ".join(f"{v:.2g}" for v in p["grad_params"])
    dep = lambda p: p.get("input_dependence", math.nan)
    ratio = lambda p: p["grad_params"][0] / p["grad_params"][-1] if p["grad_params"][-1] else math.inf
    return text(
        f"{who}: from step 0 to step {b['step']} the gradient of the bottom block goes from "
        f"{a['grad_params'][0]:.2g} to {b['grad_params'][0]:.2g} while the top block's goes "
        f"from {a['grad_params'][-1]:.2g} to {b['grad_params'][-1]:.2g} (all {n} at step "
        f"{b['step']}, bottom first: {g(b)}; bottom / top from {ratio(a):.2g} to {ratio(b):.2g}); "
        f"the stream RMS after the last write goes from "
        f"{a['resid_rms'][-1]:.3g} to {b['resid_rms'][-1]:.3g}; the predictions' input "
        f"dependence (mean TV distance from their average, 0 = the same prediction for every "
        f"input) goes from {dep(a):.3f} to {dep(b):.3f}.",
        f"{who_zh}:从第 0 步到第 {b['step']} 步,最底块的梯度从 {a['grad_params'][0]:.2g} 变为 "
        f"{b['grad_params'][0]:.2g},最顶块从 {a['grad_params'][-1]:.2g} 变为 "
        f"{b['grad_params'][-1]:.2g}(第 {b['step']} 步全部 {n} 块,自底向上:{g(b)};"
        f"底/顶从 {ratio(a):.2g} 变为 {ratio(b):.2g});"
        f"最后一次写入后的残差流 RMS 从 {a['resid_rms'][-1]:.3g} 变为 {b['resid_rms'][-1]:.3g};"
        f"预测对输入的依赖(与平均预测的总变差距离,0 表示对任何输入都给出同一预测)从 "
        f"{dep(a):.3f} 变为 {dep(b):.3f}。")

