"""init-gradients: the gradient each block receives at initialisation, with and without
the residual, and Pre- against Post-Norm at the plain 0.02 init of Xiong et al. 2020
(measured on a fixed batch, no training)."""

from __future__ import annotations

import math

from depthlab.config import Config
from depthlab.experiments.analysis import by_arm
from depthlab.experiments.report import BLUE, GREEN, ORANGE, RED, chart, fmt, mean, series
from depthlab.experiments.spec import (
    Budget,
    Experiment,
    Report,
    RunResult,
    RunSpec,
    Seeds,
    at_least,
    specs_over_seeds,
    variant,
)
from depthlab.experiments.wording import Text, phrase

COLORS = {"pre-residual": GREEN, "pre-none": RED, "pre-residual-init0.02": ORANGE,
          "post-residual-init0.02": BLUE}


def grid(base: Config, budget: Budget, seeds: Seeds) -> list[RunSpec]:
    """The course model with and without residual, and Pre vs Post-Norm at the plain 0.02
    init of Xiong et al. 2020 (the 0.02/sqrt(2L) rule would itself shrink the difference)."""
    deep = variant(base, f"model.n_layers={budget.deep}")
    plain_init = variant(deep, "model.scaled_init=false")
    arms = [
        ("pre-residual", "Pre-Norm, residual", deep),
        ("pre-none", "Pre-Norm, no residual", variant(deep, "model.residual=none")),
        ("pre-residual-init0.02", "Pre-Norm, residual, init 0.02", plain_init),
        ("post-residual-init0.02", "Post-Norm, residual, init 0.02",
         variant(plain_init, "model.placement=post")),
    ]
    return specs_over_seeds(arms, at_least(seeds, 3), init_only=True)


def analyze(results: list[RunResult], budget: Budget) -> Report:
    arms = by_arm(results)
    curves, ratios = [], {}
    report = Report()
    report.table["columns"] = ["arm", "first block", "last block", "last / first"]
    for arm, runs in arms.items():
        grads = [r.of("probe")[0]["grad_params"] for r in runs]
        per_block = [mean([g[i] for g in grads]) for i in range(len(grads[0]))]
        curves.append(series(runs[0].spec.label, list(range(1, len(per_block) + 1)), per_block,
                             COLORS.get(arm)))
        ratios[arm] = [g[-1] / g[0] if g[0] > 0 else math.inf for g in grads]
        report.table["rows"].append([runs[0].spec.label, f"{per_block[0]:.3g}",
                                     f"{per_block[-1]:.3g}", fmt(ratios[arm])])
    report.charts.append(chart(
        "block_grads", phrase("init-gradients.chart.block_grads", layers=budget.deep,
                              seeds=len(arms["pre-residual"])),
        phrase("init-gradients.axis.block"), phrase("init-gradients.axis.grad"), curves,
        y_log=True))
    post, pre = mean(ratios["post-residual-init0.02"]), mean(ratios["pre-residual-init0.02"])
    factor = post / pre
    report.conclusions.append(phrase(
        "init-gradients.post_vs_pre." + ("clear" if factor >= 1.5 else "unclear"),
        factor=f"{factor:.2f}", post=f"{post:.3f}", pre=f"{pre:.3f}"))
    report.conclusions.append(xiong_profile(post, pre))
    none, pre = mean(ratios["pre-none"]), mean(ratios["pre-residual"])
    report.conclusions.append(phrase(
        "init-gradients.no_residual", none=f"{none:.3g}", pre=f"{pre:.3g}",
        where=phrase("init-gradients.bottom_" + ("more" if none < pre else "less"))))
    return report


def gradient_profile(ratio: float) -> str:
    """How a last/first block gradient ratio reads: a factor 1.5 either way is a slope."""
    if ratio > 1.5:
        return "grows"
    if ratio < 1 / 1.5:
        return "falls"
    return "flat"


def xiong_profile(post: float, pre: float) -> Text:
    """Where the measured profiles agree with Xiong et al. 2020 (Post-LN's gradient grows
    toward the output, Pre-LN's stays flat) and where they do not."""
    p, q = gradient_profile(post), gradient_profile(pre)
    agree = [name for name, got, want in (("Post-LN", p, "grows"), ("Pre-LN", q, "flat"))
             if got == want]
    if len(agree) == 2:
        verdict = phrase("init-gradients.xiong.both_agree")
    elif agree:
        verdict = phrase("init-gradients.xiong.one_agrees", agree=agree[0],
                         differ="Pre-LN" if agree[0] == "Post-LN" else "Post-LN")
    else:
        verdict = phrase("init-gradients.xiong.both_differ")
    return phrase("init-gradients.xiong", post_profile=phrase(f"init-gradients.profile.{p}"),
                  pre_profile=phrase(f"init-gradients.profile.{q}"), post=f"{post:.2f}",
                  pre=f"{pre:.2f}", verdict=verdict)


EXPERIMENT = Experiment("init-gradients", ("model.residual", "model.placement",
                                           "model.scaled_init"), grid, analyze)
