"""stream-rms: how the residual stream's RMS grows with each write, at initialisation
for the scaled (0.02/sqrt(2L)) and the plain 0.02 init at two depths, and after
training the course model."""

from __future__ import annotations

import math

from depthlab.config import Config
from depthlab.experiments.analysis import by_arm
from depthlab.experiments.report import BLUE, GREEN, GREY, ORANGE, RED, chart, series
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
from depthlab.experiments.wording import phrase

WRITES = phrase("stream-rms.axis.writes")
RULES = (("scaled", "0.02/sqrt(2L)"), ("plain", "0.02"))


def grid(base: Config, budget: Budget, seeds: Seeds) -> list[RunSpec]:
    arms_init = []
    for depth in (budget.deep, budget.deepest):
        for scaled in (True, False):
            rule = "0.02/sqrt(2L)" if scaled else "0.02"
            arms_init.append((f"init-L{depth}-{'scaled' if scaled else 'plain'}",
                              f"{depth} layers, init {rule}",
                              variant(base, f"model.n_layers={depth}",
                                      f"model.scaled_init={str(scaled).lower()}")))
    trained = [("trained", f"{budget.shallow} layers, residual (trained)",
                variant(base, f"model.n_layers={budget.shallow}"))]
    one = seeds if isinstance(seeds, tuple) else 1  # one seed (0) unless seeds are named
    return specs_over_seeds(arms_init, one, init_only=True) + specs_over_seeds(trained, one)


def writes_chart(first: dict, last: dict, budget: Budget) -> dict:
    """The trained model's stream RMS after each write, relative to the embedding's."""
    writes = list(range(len(first["resid_rms"])))
    rel = lambda rec: [v / rec["resid_rms"][0] for v in rec["resid_rms"]]
    return chart(
        "writes", phrase("stream-rms.chart.writes", layers=budget.shallow), WRITES,
        phrase("stream-rms.axis.relative"),
        [series("at initialisation", writes, rel(first), BLUE),
         series(f"after training (step {last['step']})", writes, rel(last), ORANGE),
         series("sqrt(1 + k): independent unit writes", writes,
                [math.sqrt(1 + k) for k in writes], GREY, dash=True)])


def analyze(results: list[RunResult], budget: Budget) -> Report:
    arms = by_arm(results)
    report = Report()
    trained = arms["trained"][0].of("probe")
    first, last = trained[0], trained[-1]
    report.charts.append(writes_chart(first, last, budget))
    depth_curves, finals = [], {}
    colors = {"scaled": GREEN, "plain": RED}
    for depth in (budget.deep, budget.deepest):
        for rule, _ in RULES:
            run = arms[f"init-L{depth}-{rule}"][0]
            rec = run.of("probe")[0]
            finals[(depth, rule)] = rec["resid_rms"][-1]
            depth_curves.append(series(run.spec.label, list(range(len(rec["resid_rms"]))),
                                       rec["resid_rms"], colors[rule], dash=depth == budget.deepest))
    report.charts.append(chart("init_depth", phrase("stream-rms.chart.init_depth"), WRITES,
                               phrase("stream-rms.axis.rms"), depth_curves, y_log=True))
    report.table["columns"] = ["init", f"final RMS, {budget.deep} layers",
                               f"final RMS, {budget.deepest} layers", "ratio"]
    for rule, name in RULES:
        lo, hi = finals[(budget.deep, rule)], finals[(budget.deepest, rule)]
        report.table["rows"].append([name, f"{lo:.4f}", f"{hi:.4f}", f"{hi / lo:.3f}"])
    r_scaled = finals[(budget.deepest, "scaled")] / finals[(budget.deep, "scaled")]
    r_plain = finals[(budget.deepest, "plain")] / finals[(budget.deep, "plain")]
    report.conclusions.append(phrase(
        "stream-rms.depth", scaled=f"{r_scaled:.3f}", plain=f"{r_plain:.3f}", deep=budget.deep,
        deepest=budget.deepest,
        within=phrase("stream-rms." + ("within" if abs(r_scaled - 1) <= 0.15 else "not_within"))))
    rms, end = first["resid_rms"], last["resid_rms"]
    grows = all(a <= c for a, c in zip(rms[1:], rms[2:], strict=False))
    report.conclusions.append(phrase(
        "stream-rms.growth", grows=phrase("stream-rms." + ("grows" if grows else "not_grows")),
        first=f"{rms[0]:.4f}", last=f"{rms[-1]:.4f}", trained=f"{end[-1]:.4f}",
        ratio=f"{end[-1] / end[0]:.2f}"))
    return report


EXPERIMENT = Experiment("stream-rms", ("model.n_layers", "model.scaled_init"), grid, analyze)
