"""AdamW parameter groups and the learning-rate schedule.

The schedule is a pure function of the step and the run's config, so a resumed
run follows exactly the curve of an uninterrupted one.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from depthlab.config import TrainConfig
from depthlab.model.shortcuts import NO_DECAY_PARTS


def param_groups(model: nn.Module, tc: TrainConfig) -> list[dict]:
    """Weight decay on matrices only: norms' scales, biases, the stream shortcuts' scalars
    and gates and (unless train.decay_embeddings) the embeddings, value embeddings
    included, keep their values."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_embedding = name.startswith(("embed_tokens", "pos_embed")) or ".value_embed.table" in name
        is_gate = any(part in name for part in NO_DECAY_PARTS)
        if p.ndim < 2 or is_gate or (is_embedding and not tc.decay_embeddings):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": tc.weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def adamw_kernel(params: list[torch.Tensor]) -> dict[str, bool]:
    """AdamW's fused kernel (one pass over all parameters per step) on devices where
    PyTorch has one for these tensors; else its foreach form (batched ops), never the
    per-parameter loop PyTorch picks by default on CPU."""
    fused_devices = ("cpu", "cuda", "mps", "xpu")
    if params and all(p.device.type in fused_devices and p.is_floating_point() for p in params):
        return {"fused": True}
    return {"foreach": True}


def make_optimizer(model: nn.Module, tc: TrainConfig) -> torch.optim.AdamW:
    groups = param_groups(model, tc)
    kernel = adamw_kernel([p for g in groups for p in g["params"]])
    return torch.optim.AdamW(groups, lr=tc.lr, betas=(tc.beta1, tc.beta2), **kernel)


def lr_at(step: int, tc: TrainConfig) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warmup over
    warmup_steps, then cosine decay to min_lr_ratio * lr at the last step."""
    if step < tc.warmup_steps:
        return tc.lr * (step + 1) / tc.warmup_steps
    decay_steps = max(1, tc.steps - 1 - tc.warmup_steps)
    progress = min(1.0, (step - tc.warmup_steps) / decay_steps)
    floor = tc.min_lr_ratio * tc.lr
    return floor + (tc.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
