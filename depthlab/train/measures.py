"""What the probe lines measure beyond the stream and the gradients, and when they are
taken: a model that collapses does so in its first few dozen steps, so probes come
densely at the start of a run and every `probe_every` steps after that.
"""

from __future__ import annotations

import torch

DENSE_PROBES = 10  # probes within the first probe_every steps


def probe_due(step: int, probe_every: int, steps: int) -> bool:
    """Probe at every multiple of probe_every and at the last step, and also every
    probe_every // DENSE_PROBES steps before the first regular probe."""
    early = step < probe_every and step % max(1, probe_every // DENSE_PROBES) == 0
    return step % probe_every == 0 or step == steps or early


@torch.no_grad()
def input_dependence(logits: torch.Tensor) -> float:
    """Mean total-variation distance of each position's next-token distribution from the
    average distribution over all positions of the batch: 0 for a model that predicts
    the same thing whatever the input (a constant predictor), up to 1 when the
    predictions share no mass with their average."""
    p = logits.detach().float().softmax(-1).flatten(0, -2)  # [positions, vocab]
    return (0.5 * (p - p.mean(0)).abs().sum(-1)).mean().item()
