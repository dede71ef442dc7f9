"""nGPT, the normalised Transformer (Loshchilov, Hsieh, Sun and Ginsburg, "nGPT: Normalized
Transformer with Representation Learning on the Hypersphere", ICLR 2025, arXiv:2410.01131):
every hidden state and every weight vector along d_model lives on the unit sphere.

It changes more than the residual line, so each piece sits where its computation is and
this module holds them all (with model.residual=ngpt; Norm(v) = v / |v|):

  the residual (`NGPTResidual`, registry key "ngpt"):
      h <- Norm(h + alpha_A * (Norm(Attn(h)) - h)), the same with alpha_M for the MLP;
      alpha learned per dimension (the paper's "eigen learning rates"); `open` puts the
      embedding on the sphere, so no norm layer is needed anywhere (the config refuses one)
  attention (`SphereQK`, used by `Attention`): q, k <- s_qk * Norm(q), s_qk * Norm(k) per
      head, after RoPE, and the softmax scale sqrt(d_k) instead of 1 / sqrt(d_k)
  SwiGLU (`SwiGLUScales`, used by `SwiGLU`): u <- s_u * u, v <- s_v * sqrt(d_model) * v
      before SiLU(v) * u (the paper's eq. 20-21)
  logits (`LogitScale`, used by `Transformer.unembed`): z <- s_z * z; with unit rows in
      the head and a unit h, z is a cosine
  the weights (`renormalise`): every d_model-vector of the embedding, the head and the
      blocks' matrices back on the sphere after init and after every optimizer step
      (`Transformer.after_optimizer_step`, which the trainer calls, whatever optimizer)

Each learned scale is a "scaled parameter" (paper section 2.5): stored at s_scale, used
times s_init / s_scale, so it starts at s_init and an optimizer's step on it is scaled by
s_init / s_scale. The constants are the paper's and NVIDIA's reference code's:
alpha 0.05 (scale 1/sqrt(d)), s_qk 1 (1/sqrt(d)), s_u = s_v = 1 (1), s_z 1 (1/sqrt(d)).
The paper trains without warmup and without weight decay (depthlab.train.optim says so
when a run sets them).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.model.fused import pair_halves
from depthlab.model.residual_base import Residual

ALPHA_INIT = 0.05
# The linears that write into the stream: their columns (not rows) are d_model-vectors.
WRITERS = ("o_proj", "down_proj")


def unit(x: torch.Tensor) -> torch.Tensor:
    """x / |x| along the last axis (the paper's Norm)."""
    return x / x.norm(dim=-1, keepdim=True)


class ScaledVector(nn.Module):
    """A learned vector stored at `scale` and used times init / scale (it starts at init)."""

    def __init__(self, n: int, init: float, scale: float) -> None:
        super().__init__()
        self.init, self.scale_ = init, scale
        self.weight = nn.Parameter(torch.full((n,), scale))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.weight.fill_(self.scale_)

    def forward(self) -> torch.Tensor:
        return self.weight * (self.init / self.scale_)

    def extra_repr(self) -> str:
        return f"n={self.weight.numel()}, init={self.init:g}, scale={self.scale_:.6g}"


class NGPTResidual(Residual):
    """h <- Norm(h + alpha * (Norm(write) - h)): a step from h towards the write's direction,
    alpha per dimension, back onto the sphere."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.alpha = ScaledVector(d_model, ALPHA_INIT, 1.0 / math.sqrt(d_model))

    def reset_parameters(self) -> None:
        self.alpha.reset_parameters()

    def open(self, x: torch.Tensor) -> torch.Tensor:
        return unit(x)

    def forward(self, stream: torch.Tensor, write: torch.Tensor) -> torch.Tensor:
        return unit(stream + self.alpha() * (unit(write) - stream))


class SphereQK(nn.Module):
    """q or k [B, heads, T, E] -> s_qk * Norm(q) per head (s_qk [heads, E], the query
    heads'; grouped K/V heads are scaled after they are repeated to the query heads)."""

    def __init__(self, n_heads: int, head_size: int, d_model: int) -> None:
        super().__init__()
        self.n_heads, self.head_size = n_heads, head_size
        self.s_qk = ScaledVector(n_heads * head_size, 1.0, 1.0 / math.sqrt(d_model))

    def reset_parameters(self) -> None:
        self.s_qk.reset_parameters()

    def forward(self, t: torch.Tensor, paired: bool = False) -> torch.Tensor:
        """paired: t's head dimensions are in RoPE's pairs (the fused training path,
        depthlab.model.fused.rotary_heads), so s_qk is read in that order too."""
        scale = self.s_qk()
        if paired:
            scale = pair_halves(scale, self.n_heads)
        return scale.view(self.n_heads, 1, self.head_size) * unit(t)


class SwiGLUScales(nn.Module):
    """gate, up -> s_v * sqrt(d_model) * gate, s_u * up (the gate is SiLU's input)."""

    def __init__(self, hidden: int, d_model: int) -> None:
        super().__init__()
        self.sqrt_d = math.sqrt(d_model)
        self.s_u = ScaledVector(hidden, 1.0, 1.0)
        self.s_v = ScaledVector(hidden, 1.0, 1.0)

    def reset_parameters(self) -> None:
        self.s_u.reset_parameters()
        self.s_v.reset_parameters()

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return gate * (self.s_v() * self.sqrt_d), up * self.s_u()


class LogitScale(nn.Module):
    """logits [.., V] -> s_z * logits, one learned scale per vocabulary entry."""

    def __init__(self, vocab_size: int, d_model: int) -> None:
        super().__init__()
        self.s_z = ScaledVector(vocab_size, 1.0, 1.0 / math.sqrt(d_model))

    def reset_parameters(self) -> None:
        self.s_z.reset_parameters()

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits * self.s_z()




def sphere_axis(name: str, module: nn.Module) -> int | None:
    """The axis of `module`'s weight whose vectors are d_model-vectors that live on the
    sphere: 1 for the embedding's and the head's rows and the linears that read the
    stream, 0 for the columns of those that write into it; None for anything else."""
    if isinstance(module, nn.Embedding):
        return 1
    if isinstance(module, nn.Linear):
        return 0 if name.endswith(WRITERS) else 1
    return None


@torch.no_grad()
def renormalise(model: nn.Module) -> None:
    """Every d_model-vector of every weight matrix back to unit norm, in place."""
    for name, module in model.named_modules():
        axis = sphere_axis(name, module)
        if axis is not None:
            module.weight.copy_(F.normalize(module.weight, dim=axis))
