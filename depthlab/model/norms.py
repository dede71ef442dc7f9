"""The norm registry: none | layernorm | rmsnorm | rmsnorm_zero_centered | dyt.

Written out rather than taken from torch.nn because the formulas are the lesson:
LayerNorm centres and scales (gamma, beta); RMSNorm only scales (gamma); the
zero-centred RMSNorm multiplies by (1 + w) with w starting at 0, so weight decay
pulls it toward the identity scale instead of toward zero. DyT is the entry that is
not a normalization at all: an elementwise tanh in a norm's place.

Each norm's `reference` method is that formula, step by step. `forward` computes
the same function with PyTorch's kernels (`F.layer_norm`: one pass instead of five
elementwise ops; `F.rms_norm`: fewer ops and a smaller autograd graph; while training on
CPU, RMSNorm's backward written out, depthlab.model.fused.rms_norm) whenever the
input and the scale share a full-precision dtype; half-precision inputs take the
reference path, which keeps its statistics in float32. No hook sits inside a norm,
so the two paths are indistinguishable to probes; tests/test_norms_fused.py checks
they agree within 1e-6.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.model import fused


def _stats_dtype(x: torch.Tensor) -> torch.dtype:
    # Half-precision means/variances lose digits; float64 probes keep theirs.
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def _fused_ok(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """The fused kernel computes in x's dtype: use it only where that is the stats dtype."""
    return x.dtype == weight.dtype == _stats_dtype(x)


class LayerNorm(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta   (Ba et al. 2016)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(_stats_dtype(x))
        mean = h.mean(-1, keepdim=True)
        var = (h - mean).pow(2).mean(-1, keepdim=True)  # biased variance, as in the paper
        h = (h - mean) * torch.rsqrt(var + self.eps)
        return h.to(x.dtype) * self.weight + self.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _fused_ok(x, self.weight):
            return self.reference(x)
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * gamma   (Zhang & Sennrich 2019): no mean, no beta."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.fused_fallback: str | None = None  # set: take F.rms_norm's path, for this reason

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(_stats_dtype(x))
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * self.normalize(x).to(x.dtype)

    def scale(self) -> torch.Tensor:
        return self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _fused_ok(x, self.weight):
            return self.reference(x)
        if self.fused_fallback is None and fused.rms_norm_ok(x):  # training on CPU
            return fused.rms_norm(x, self.scale(), self.eps)
        return F.rms_norm(x, x.shape[-1:], self.scale(), self.eps)


class ZeroCenteredRMSNorm(RMSNorm):
    """RMSNorm with scale (1 + w), w initialised to 0 (Gemma, Qwen3-Next)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__(dim, eps)
        nn.init.zeros_(self.weight)

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.weight)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        h = self.normalize(x)
        return (h * (1.0 + self.weight.to(h.dtype))).to(x.dtype)

    def scale(self) -> torch.Tensor:
        return 1.0 + self.weight


class DyT(nn.Module):
    """Dynamic Tanh: y = gamma * tanh(alpha * x) + beta, in place of a norm.

    Zhu, Chen, He, LeCun, Liu 2025, "Transformers without Normalization" (CVPR 2025,
    arXiv:2503.10622): DyT(x) = gamma * tanh(alpha * x) + beta, with alpha one learnable
    scalar (init alpha_0 = 0.5, the paper's default and the reference code's
    `alpha_init_value`; for its LLaMA runs the paper tunes alpha_0 by model width, which
    this switch does not), gamma a per-channel vector of ones and beta one of zeros
    (facebookresearch/DynamicTanh). No statistics
    are computed: tanh squashes the few large activations the way LayerNorm's
    S-shaped input-output map does, so there is no eps (the argument is accepted only
    so every norm is built alike) and no fused kernel: `forward` is the formula.
    """

    ALPHA_INIT = 0.5

    def __init__(self, dim: int, eps: float | None = None) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.full((), self.ALPHA_INIT))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.ALPHA_INIT)
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * torch.tanh(self.alpha * x) + self.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.reference(x)

    def extra_repr(self) -> str:
        return f"alpha_init={self.ALPHA_INIT}"


NORM_CLASSES: dict[str, type[nn.Module]] = {
    "layernorm": LayerNorm,
    "rmsnorm": RMSNorm,
    "rmsnorm_zero_centered": ZeroCenteredRMSNorm,
    "dyt": DyT,
}


def make_norm(kind: str, dim: int, eps: float) -> nn.Module | None:
    """The norm for a slot, or None for norm='none' (so print(model) tells the truth)."""
    if kind == "none":
        return None
    return NORM_CLASSES[kind](dim, eps)
