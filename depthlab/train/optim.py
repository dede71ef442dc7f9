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


def param_groups(model: nn.Module, train_cfg: TrainConfig,
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
        if p.ndim < 2 or is_gate or (is_embedding and not train_cfg.decay_embeddings):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": train_cfg.weight_decay},
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


def orthogonalise_dtype(device: torch.device) -> torch.dtype:
    """The dtype of Muon's Newton-Schulz iterations on this device: bfloat16 on
    accelerators, as torch.optim.Muon runs them, float32 on CPU (see `Muon`)."""
    return torch.float32 if device.type == "cpu" else torch.bfloat16


def newton_schulz(update: torch.Tensor, coefficients: tuple[float, float, float], steps: int,
                  eps: float, dtype: torch.dtype) -> torch.Tensor:
    """An approximately orthogonal matrix with update's singular vectors (singular values
    pushed towards 1 by `steps` quintic iterations, Jordan 2024): torch.optim.Muon's
    iteration, op for op, run in `dtype`. Wide orientation first, so the Gram matrix is
    the smaller square."""
    a, b, c = coefficients
    tall = update.size(0) > update.size(1)
    x = update.to(dtype)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)  # spectral norm <= Frobenius norm <= 1 (not in place:
    # in float32 `x` may be the momentum buffer itself)
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


def adjusted_lr(lr: float, rule: str | None, shape: torch.Size) -> float:
    """Muon's per-matrix lr: torch.optim.Muon's `adjust_lr_fn` rules."""
    rows, cols = shape[:2]
    if rule in (None, "original"):
        return lr * math.sqrt(max(1.0, rows / cols))
    if rule == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    return lr


class Muon(torch.optim.Muon):
    """torch.optim.Muon, with the Newton-Schulz iterations in float32 on CPU.

    torch runs them in bfloat16, the right choice on GPUs, whose tensor cores multiply
    bfloat16 several times faster than float32. A CPU without bfloat16 instructions
    (AVX2: most laptops and many servers) emulates it: on an AVX2 EPYC a Muon step of
    the course model ran 15-18x slower than with float32 iterations (bench/muon_step.py)
    and cost several forward and backward passes. float32 is also the more exact of the two.
    Elsewhere the step is torch's: its state (one momentum buffer per matrix), its
    hyperparameters and its update, op for op (tests/test_optim.py holds the two equal
    in bfloat16)."""

    def __init__(self, params, *args, orthogonalise_in: torch.dtype | None = None,
                 **kwargs) -> None:
        super().__init__(params, *args, **kwargs)
        self.orthogonalise_in = orthogonalise_in  # None: orthogonalise_dtype(device)

    def orthogonalises_in(self, p: torch.Tensor) -> torch.dtype:
        return self.orthogonalise_in or orthogonalise_dtype(p.device)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 (torch.optim.Optimizer's signature)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, momentum, decay = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse or torch.is_complex(p):
                    raise RuntimeError("Muon steps dense real matrices only")
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(
                        p.grad, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - momentum)
                update = p.grad.lerp(buf, momentum) if group["nesterov"] else buf
                update = newton_schulz(update, group["ns_coefficients"], group["ns_steps"],
                                       group["eps"], self.orthogonalises_in(p))
                p.mul_(1 - lr * decay)
                p.add_(update, alpha=-adjusted_lr(lr, group["adjust_lr_fn"], p.shape))
        return loss


class OptimizerPair:
    """Muon on the hidden matrices and AdamW on the rest, stepped, zeroed, saved and
    loaded as one optimizer (the part of torch.optim.Optimizer the trainer uses)."""

    def __init__(self, muon: Muon, adamw: torch.optim.AdamW) -> None:
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


def state_mismatch(optimizer: Optimizer, state: object) -> str | None:
    """Why a saved optimizer state cannot be loaded into `optimizer`, or None when it fits:
    its layout, its count of parameters, and each per-parameter tensor's shape (a damaged
    state.pt whose moments have another shape would otherwise reach AdamW's fused kernel,
    which reads past them)."""
    if isinstance(optimizer, OptimizerPair):
        if not isinstance(state, dict) or set(state) != set(optimizer.parts):
            return f"not the state of {' and '.join(optimizer.parts)} together"
        return next((f"{name}: {why}" for name, opt in optimizer.parts.items()
                     if (why := state_mismatch(opt, state[name])) is not None), None)
    if not (isinstance(state, dict) and isinstance(state.get("state"), dict)
            and isinstance(state.get("param_groups"), list)
            and all(isinstance(g, dict) and isinstance(g.get("params"), list)
                    for g in state["param_groups"])):
        return "not an optimizer state (state, param_groups)"
    params = [p for g in optimizer.param_groups for p in g["params"]]
    saved = [i for g in state["param_groups"] for i in g["params"]]
    if len(saved) != len(params) or len(state["param_groups"]) != len(optimizer.param_groups):
        return (f"{len(saved)} parameters in {len(state['param_groups'])} groups, the model's "
                f"optimizer has {len(params)} in {len(optimizer.param_groups)}")
    for i, p in zip(saved, params, strict=True):
        entry = state["state"].get(i, {})
        if not isinstance(entry, dict):
            return f"parameter {i}: not a dict of tensors"
        for name, t in entry.items():
            if isinstance(t, torch.Tensor) and t.dim() > 0 and t.shape != p.shape:
                return f"{name} of parameter {i} is {tuple(t.shape)}, the parameter {tuple(p.shape)}"
    return None


def make_optimizer(model: nn.Module, train_cfg: TrainConfig) -> Optimizer:
    """AdamW on everything, or (train.optimizer=muon) Muon on `muon_names` and AdamW on
    the rest. Muon takes no weight decay here (nanochat's and Keller Jordan's setting);
    its update is scaled by sqrt(max(1, rows / cols)) (torch's "original" rule), and its
    Newton-Schulz iterations run in float32 on CPU (`Muon`)."""
    skip: frozenset[int] = frozenset()
    muon = None
    if train_cfg.optimizer == "muon":
        params = dict(model.named_parameters())
        matrices = [params[n] for n in muon_names(model)]
        skip = frozenset(id(p) for p in matrices)
        muon = Muon(matrices, lr=train_cfg.muon_lr, momentum=train_cfg.muon_momentum, weight_decay=0.0)
    groups = param_groups(model, train_cfg, skip)
    kernel = adamw_kernel([p for g in groups for p in g["params"]])
    adamw = torch.optim.AdamW(groups, lr=train_cfg.lr, betas=(train_cfg.beta1, train_cfg.beta2), **kernel)
    return adamw if muon is None else OptimizerPair(muon, adamw)


def lr_at(step: int, train_cfg: TrainConfig, peak: float | None = None) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warmup over
    warmup_steps, then cosine decay to min_lr_ratio * peak at the last step; the peak
    is train.lr unless given (Muon's is train.muon_lr, on the same curve)."""
    peak = train_cfg.lr if peak is None else peak
    if step < train_cfg.warmup_steps:
        return peak * (step + 1) / train_cfg.warmup_steps
    decay_steps = max(1, train_cfg.steps - 1 - train_cfg.warmup_steps)
    progress = min(1.0, (step - train_cfg.warmup_steps) / decay_steps)
    floor = train_cfg.min_lr_ratio * peak
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def set_lr(optimizer: Optimizer, step: int, train_cfg: TrainConfig) -> float:
    """Put step `step`'s learning rates into every group; returns AdamW's (the logged lr)."""
    lr = lr_at(step, train_cfg)
    if isinstance(optimizer, OptimizerPair):
        muon_lr = lr_at(step, train_cfg, train_cfg.muon_lr)
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
        how = (f"; Newton-Schulz in {str(opt.orthogonalises_in(params[0])).removeprefix('torch.')}"
               if isinstance(opt, Muon) and params else "")
        lines.append(f"{label}: {len(params)} tensors, {sum(p.numel() for p in params):,} "
                     f"weights ({', '.join(shapes)}){how}")
    return "\n".join(lines)


def ngpt_advice(cfg: Config) -> str | None:
    """One line when an nGPT run sets what its paper trains without (warmup, weight
    decay: the weights are renormalised after every step); None otherwise."""
    t = cfg.train
    if not cfg.model.on_sphere or (t.warmup_steps == 0 and t.weight_decay == 0):
        return None
    return (f"depthlab: note: model.residual={cfg.model.residual} is trained without warmup or weight decay "
            f"(Loshchilov et al. 2025); this run sets train.warmup_steps={t.warmup_steps}, "
            f"train.weight_decay={t.weight_decay:g} (0 and 0 follow the paper)")
