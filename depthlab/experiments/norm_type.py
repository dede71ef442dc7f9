"""norm-type: LayerNorm, RMSNorm and zero-centred RMSNorm trained side by side, with the
time per call from a benchmark of its own (depthlab.experiments.norm_timing)."""

from __future__ import annotations

from depthlab.config import Config
from depthlab.experiments.analysis import by_arm, final_values, gap_sentence, loss_charts
from depthlab.experiments.baselines import baselines
from depthlab.experiments.norm_timing import SHAPE, time_norms, timing_rows
from depthlab.experiments.report import BLUE, GREEN, PURPLE, fmt
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
from depthlab.experiments.wording import Text, phrase, same

NORM_COLORS = {"layernorm": BLUE, "rmsnorm": GREEN, "rmsnorm_zero_centered": PURPLE}


def grid(base: Config, budget: Budget, seeds: Seeds) -> list[RunSpec]:
    arms = [(norm, norm, variant(base, f"model.norm={norm}")) for norm in NORM_COLORS]
    return specs_over_seeds(arms, seeds)


def analyze(results: list[RunResult], budget: Budget) -> Report:
    arms = by_arm(results)
    base = baselines(results[0].spec.cfg)
    report = Report(charts=loss_charts(arms, {k: (c, False) for k, c in NORM_COLORS.items()},
                                       base), baselines=base.to_json())
    timing = time_norms(rounds=budget.timing_rounds, calls=2 if budget.name == "micro" else 20)
    report.table["columns"] = ["norm", "final val loss",
                               f"ms per norm call, fwd+bwd on {'x'.join(map(str, SHAPE))}",
                               "ms per 1-block model step, fwd+bwd"]
    v = {}
    for (arm, runs), row in zip(arms.items(), timing_rows(timing), strict=True):
        v[arm] = final_values(runs)
        report.table["rows"].append([arm, fmt(v[arm]), *row[1:]])
    report.conclusions.append(gap_sentence(phrase("norm-type.what.rms_vs_ln"), v["layernorm"],
                                           v["rmsnorm"], same("LayerNorm"), same("RMSNorm")))
    report.conclusions.append(gap_sentence(
        phrase("norm-type.what.zero_vs_plain"), v["rmsnorm"], v["rmsnorm_zero_centered"],
        same("RMSNorm"), phrase("norm-type.name.zero_centred")))
    report.conclusions.append(timing_sentence(timing, budget))
    return report


def timing_sentence(timing: dict, budget: Budget) -> Text:
    n_ln, n_rms = (timing["norm"][k]["thread_median_ms"] for k in ("layernorm", "rmsnorm"))
    b_ln, b_rms = (timing["block"][k]["thread_median_ms"] for k in ("layernorm", "rmsnorm"))
    return phrase(
        "norm-type.timing", rounds=budget.timing_rounds, shape="x".join(map(str, SHAPE)),
        n_ln=f"{n_ln:.3f}", n_rms=f"{n_rms:.3f}", norm_ratio=f"{n_ln / n_rms:.2f}",
        b_ln=f"{b_ln:.2f}", b_rms=f"{b_rms:.2f}", block_ratio=f"{b_ln / b_rms:.2f}",
        share=f"{300 * n_ln / b_ln:.0f}")


EXPERIMENT = Experiment("norm-type", ("model.norm",), grid, analyze)
