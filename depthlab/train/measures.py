"""What the probe lines measure beyond the stream and the gradients, and when they are
taken: a model that collapses does so in its first few dozen steps, so probes come
densely at the start of a run and every `probe_every` steps after that.
"""

from __future__ import annotations

from typing import Any

import torch

from depthlab.model.ngpt import NGPTResidual
from depthlab.model.shortcuts import GATE_HOOKS, learned_values

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


def ngpt_alphas(model: torch.nn.Module) -> dict[str, list[float]]:
    """nGPT's eigen learning rates (depthlab.model.ngpt): the mean effective alpha of each
    layer's attention and MLP update, how far each step moves the stream towards the
    write. {} for another residual."""
    blocks = list(model.blocks)
    if not isinstance(blocks[0].attn_residual, NGPTResidual):
        return {}
    return {"ngpt_alpha_attn": [b.attn_residual.alpha().mean().item() for b in blocks],
            "ngpt_alpha_mlp": [b.mlp_residual.alpha().mean().item() for b in blocks]}


@torch.no_grad()
def shortcut_values(model: torch.nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """The stream shortcuts' learned scalars (depthlab.model.shortcuts.learned_values),
    nGPT's alphas, and the mean of the input-dependent gates on the batch x: smear's, and
    each value embedding's per layer (None on layers without one). {} for a model without
    any of them. Its keys are among LEARNED_KEYS."""
    values: dict[str, Any] = {**learned_values(model), **ngpt_alphas(model)}
    hooks = set(model.hook_names())
    smear = GATE_HOOKS["smear_gate"]
    layers = [GATE_HOOKS["value_embed_gate"].format(i=i) for i in range(len(model.blocks))]
    wanted = [n for n in (smear, *layers) if n in hooks]
    if not wanted:
        return values
    _, cache = model.run_with_cache(x, names=wanted)
    if smear in cache:
        values["smear_gate"] = cache[smear].float().mean().item()
    if any(n in cache for n in layers):
        values["value_embed_gate"] = [cache[n].float().mean().item() if n in cache else None
                                      for n in layers]
    return values
