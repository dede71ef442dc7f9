"""attn-gate: a sigmoid gate on the attention output, against none: the loss, and the
share of attention the first token draws (an attention sink)."""

from __future__ import annotations

import math
from pathlib import Path

from depthlab.config import Config
from depthlab.experiments.analysis import by_arm, final_values, gap_sentence, loss_charts
from depthlab.experiments.baselines import baselines
from depthlab.experiments.report import BLUE, GREEN, fmt, mean
from depthlab.experiments.spec import (
    Budget,
    Experiment,
    Report,
    RunResult,
    RunSpec,
    specs_over_seeds,
    variant,
    with_steps,
)
from depthlab.experiments.wording import Text, phrase


WIDE = ("wide-no-gate", "wide-gate")  # the pair of Budget.wide, beside the course-scale one


def grid(base: Config, b: Budget, seeds: int) -> list[RunSpec]:
    """The course model with and without the gate; where the budget names one, the same
    pair wider and longer (Budget.wide), to see whether a sink forms at all on a CPU."""
    arms = [("no-gate", "no gate", base),
            ("gate", "sigmoid output gate", variant(base, "model.attn_gate=true"))]
    if b.wide:
        wide = with_steps(variant(base, *b.wide), b.wide_steps)
        shape = (f"d {wide.model.d_model}, context {wide.train.seq_len}, "
                 f"{wide.train.steps} steps")
        arms += [(WIDE[0], f"no gate, {shape}", wide),
                 (WIDE[1], f"sigmoid output gate, {shape}",
                  variant(wide, "model.attn_gate=true"))]
    return specs_over_seeds(arms, seeds)


def first_token_share(run_dir: Path) -> tuple[float, float]:
    """Mean attention weight each query puts on token 0 (all layers and heads) on a
    fixed validation batch, and the uniform causal baseline mean_n 1/n = H_T / T."""
    import torch

    from depthlab.rundir import load_model
    from depthlab.tokenizer import prepare_data
    from depthlab.train import batches

    model, cfg = load_model(run_dir)
    data = prepare_data(cfg.data)
    x, _ = batches.fixed_batch(data.val, 8, cfg.train.seq_len, torch.device("cpu"))
    with torch.no_grad():
        _, cache = model.run_with_cache(x, names=lambda n: n.endswith("hook_pattern"))
    shares = torch.stack([cache[n][..., 0] for n in cache.keys()])  # [L, B, H, T]
    T = x.shape[1]
    baseline = sum(1 / n for n in range(1, T + 1)) / T
    return shares.mean().item(), baseline


def analyze(results: list[RunResult], b: Budget) -> Report:
    arms = by_arm(results)
    base = baselines(results[0].spec.cfg)
    report = Report(charts=loss_charts(arms, {"no-gate": (BLUE, False), "gate": (GREEN, False)},
                                       base), baselines=base.to_json())
    report.table["columns"] = ["arm", "final val loss", "attention on first token",
                               "uniform baseline H_T/T"]
    shares: dict[str, list[float]] = {}
    baseline = math.nan
    for arm, runs in arms.items():
        shares[arm] = []
        for r in runs:
            share, baseline = first_token_share(r.run_dir)
            shares[arm].append(share)
        report.table["rows"].append([runs[0].spec.label, fmt(final_values(runs)),
                                     f"{100 * mean(shares[arm]):.1f}%", f"{100 * baseline:.1f}%"])
    v = {arm: final_values(runs) for arm, runs in arms.items()}
    report.conclusions.append(gap_sentence(
        phrase("attn-gate.what.val_loss"), v["no-gate"], v["gate"],
        phrase("attn-gate.name.ungated"), phrase("attn-gate.name.gated")))
    report.conclusions.append(sink_sentence(mean(shares["no-gate"]), mean(shares["gate"]),
                                            baseline))
    return report


def sink_sentence(s_no: float, s_gate: float, baseline: float) -> Text:
    """Whether an attention sink formed without the gate (twice the uniform share)."""
    if s_no > 2 * baseline:
        verdict = phrase("attn-gate.sink")
    else:
        verdict = phrase("attn-gate.no_sink", relation=phrase(
            "attn-gate." + ("below" if s_no < baseline else "under_twice")))
    return phrase("attn-gate.share", ungated=f"{100 * s_no:.1f}", gated=f"{100 * s_gate:.1f}",
                  uniform=f"{100 * baseline:.1f}", verdict=verdict)


EXPERIMENT = Experiment("attn-gate", (
    "model.attn_gate", "model.d_model", "train.seq_len", "train.batch_size", "train.steps",
    "train.ckpt_every", "train.warmup_steps"), grid, analyze)
