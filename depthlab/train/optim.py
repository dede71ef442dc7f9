"""The optimizer (AdamW, or Muon on the hidden matrices with AdamW elsewhere), its
parameter groups and the learning-rate schedule.

The schedule is a pure function of the step and the run's config, so a resumed run
follows exactly the curve of an uninterrupted one. With train.optimizer=muon the two
optimizers step together as one (`OptimizerPair`): one state dict, so a checkpoint
keeps both optimizers' state and a resume is bitwise.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from torch import nn

from depthlab.config import Config, TrainConfig
from depthlab.model.shortcuts import NO_DECAY_PARTS


def param_groups(model: nn.Module, tc: TrainConfig,
                 skip: frozenset[int] = frozenset()) -> list[dict]:
    """Weight decay on matrices only: norms' scales, biases, the stream shortcuts' scalars
    and gates and (unless train.decay_embeddings) the embeddings, value embeddings
    included, keep their values. `skip`: the ids of parameters another optimizer steps."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in skip:
            continue
        is_embedding = name.startswith(("embed_tokens", "pos_embed")) or ".value_embed.table" in name
        is_gate = any(part in name for part in NO_DECAY_PARTS)
        if p.ndim < 2 or is_gate or (is_embedding and not tc.decay_embeddings):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": tc.weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def muon_names(model: nn.Module) -> list[str]:
    """The hidden matrices Muon steps: the weights of the linear layers inside the blocks
    (attention's q, k, v, o and the FFN's projections). The embeddings, the LM head, the
    norms' gains and every scalar or vector stay with AdamW (Jordan 2024; nanochat)."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        return []
    return [f"blocks.{name}.weight" for name, module in blocks.named_modules()
            if isinstance(module, nn.Linear) and module.weight.requires_grad]


def adamw_kernel(params: list[torch.Tensor]) -> dict[str, bool]:
    """AdamW's fused kernel (one pass over all parameters per step) on devices where
    PyTorch has one for these tensors; else its foreach form (batched ops), never the
    per-parameter loop PyTorch picks by default on CPU."""
    fused_devices = ("cpu", "cuda", "mps", "xpu")
    if params and all(p.device.type in fused_devices and p.is_floating_point() for p in params):
        return {"fused": True}
    return {"foreach": True}


class OptimizerPair:
    """Muon on the hidden matrices and AdamW on the rest, stepped, zeroed, saved and
    loaded as one optimizer (the part of torch.optim.Optimizer the trainer uses)."""

    def __init__(self, muon: torch.optim.Muon, adamw: torch.optim.AdamW) -> None:
        self.muon, self.adamw = muon, adamw

    @property
    def parts(self) -> dict[str, torch.optim.Optimizer]:
        return {"muon": self.muon, "adamw": self.adamw}

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for opt in self.parts.values() for g in opt.param_groups]

    def step(self) -> None:
        for opt in self.parts.values():
            opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.parts.values():
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {name: opt.state_dict() for name, opt in self.parts.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, opt in self.parts.items():
            opt.load_state_dict(state[name])


# What the trainer steps: AdamW alone, or Muon and AdamW as one (train.optimizer).
Optimizer = torch.optim.Optimizer | OptimizerPair


def make_optimizer(model: nn.Module, tc: TrainConfig) -> Optimizer:
    """AdamW on everything, or (train.optimizer=muon) Muon on `muon_names` and AdamW on
    the rest. Muon takes no weight decay here (nanochat's and Keller Jordan's setting);
    its update is scaled by sqrt(max(1, rows / cols)) (torch's "original" rule)."""
    skip: frozenset[int] = frozenset()
    muon = None
    if tc.optimizer == "muon":
        params = dict(model.named_parameters())
        matrices = [params[n] for n in muon_names(model)]
        skip = frozenset(id(p) for p in matrices)
        muon = torch.optim.Muon(matrices, lr=tc.muon_lr, momentum=tc.muon_momentum,
                                weight_decay=0.0)
    groups = param_groups(model, tc, skip)
    kernel = adamw_kernel([p for g in groups for p in g["params"]])
    adamw = torch.optim.AdamW(groups, lr=tc.lr, betas=(tc.beta1, tc.beta2), **kernel)
    return adamw if muon is None else OptimizerPair(muon, adamw)


def lr_at(step: int, tc: TrainConfig, peak: float | None = None) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warmup over
    warmup_steps, then cosine decay to min_lr_ratio * peak at the last step; the peak
    is train.lr unless given (Muon's is train.muon_lr, on the same curve)."""
    peak = tc.lr if peak is None else peak
    if step < tc.warmup_steps:
        return peak * (step + 1) / tc.warmup_steps
    decay_steps = max(1, tc.steps - 1 - tc.warmup_steps)
    progress = min(1.0, (step - tc.warmup_steps) / decay_steps)
    floor = tc.min_lr_ratio * peak
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def set_lr(optimizer: Optimizer, step: int, tc: TrainConfig) -> float:
    """Put step `step`'s learning rates into every group; returns AdamW's (the logged lr)."""
    lr = lr_at(step, tc)
    if isinstance(optimizer, OptimizerPair):
        muon_lr = lr_at(step, tc, tc.muon_lr)
        for group in optimizer.muon.param_groups:
            group["lr"] = muon_lr
        optimizer = optimizer.adamw
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


def describe_groups(model: nn.Module, optimizer: Optimizer) -> str:
    """Which parameters each optimizer steps, one line each: the parameter names with the
    layer number as `*`, the tensor and weight counts (printed when a run starts)."""
    names = {id(p): n for n, p in model.named_parameters()}
    parts = optimizer.parts if isinstance(optimizer, OptimizerPair) else {"adamw": optimizer}
    lines = []
    for kind, opt in parts.items():
        params = [p for g in opt.param_groups for p in g["params"]]
        shapes = sorted({re.sub(r"\.\d+\.", ".*.", names[id(p)]) for p in params})
        label = "Muon" if kind == "muon" else "AdamW"
        lines.append(f"{label}: {len(params)} tensors, {sum(p.numel() for p in params):,} "
                     f"weights ({', '.join(shapes)})")
    return "\n".join(lines)


def ngpt_advice(cfg: Config) -> str | None:
    """One line when an nGPT run sets what its paper trains without (warmup, weight
    decay: the weights are renormalised after every step); None otherwise."""
    t = cfg.train
    if cfg.model.residual != "ngpt" or (t.warmup_steps == 0 and t.weight_decay == 0):
        return None
    return (f"depthlab: note: model.residual=ngpt is trained without warmup or weight decay "
            f"(Loshchilov et al. 2025); this run sets train.warmup_steps={t.warmup_steps}, "
            f"train.weight_decay={t.weight_decay:g} (0 and 0 follow the paper)")
