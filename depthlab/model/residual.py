"""The residual registry: how a sublayer reads the stream and how its output goes back in.

The lesson's whole subject is the line `x = x + F(x)`. Written as a module per write,
every variant of that line is one entry here, and `Block.forward` reads the same for
all of them:

    h = residual.read(x)             # what the sublayer sees (before its input norm)
    write = residual.scale(F(h))     # the write as it enters; the *_write hook sees this
    x = residual(x, write)           # the new stream

and the model opens the stream after the embedding and closes it before the final norm
(`open`, `close`: the identity for a single stream; designs that carry several copies
of the stream, or all earlier writes, override them).

Entries:
  none    x <- F(x)                       the ablation: no skip path
  plain   x <- x + F(x)                   He et al. 2016
  scaled  x <- x + F(x) / sqrt(2L)        each of the 2L writes scaled at run time
  rezero  x <- x + a * F(x), a = 0 at init, learned per write (Bachlechner et al. 2020,
          "ReZero is All You Need", eq. 3): every block is the identity at init
  deepnorm x <- LN(alpha * x + F(x)), alpha = (2N)^(1/4), with v/o/FFN init times
          beta = (8N)^(-1/4) (Wang et al. 2022, DeepNet); needs placement=post
  hc      n copies of the stream [B, T, n, D], static + dynamic width/depth connections
          (Zhu et al., ICLR 2025; depthlab.model.hyper)
  mhc     hc with a doubly stochastic mixing matrix by Sinkhorn-Knopp (DeepSeek, mHC;
          depthlab.model.hyper)
  attnres each read a softmax mix over depth of all earlier writes, the stream being
          their history [B, T, k, D] (Kimi, Attention Residuals; depthlab.model.depth_attention)
  ngpt    x <- Norm(x + alpha * (Norm(F(x)) - x)) on the unit sphere, alpha learned per
          dimension (Loshchilov et al., ICLR 2025, nGPT); the rest of the normalised
          Transformer (unit weights, scaled q/k, SwiGLU and logits) is depthlab.model.ngpt
"""

from __future__ import annotations

import math

import torch
from torch import nn

from depthlab.config import ModelConfig
from depthlab.model.depth_attention import AttentionResidual
from depthlab.model.hyper import HyperConnection, ManifoldHyperConnection
from depthlab.model.ngpt import NGPTResidual
from depthlab.model.residual_base import Residual, stream_view


class NoResidual(Residual):
    """x <- F(x): the stack of the naive plan, the ablation of the lesson."""

    def forward(self, stream: torch.Tensor, write: torch.Tensor) -> torch.Tensor:
        return write


class ScaledResidual(Residual):
    """x <- x + F(x) * write_scale, with write_scale = 1/sqrt(2L) (`ModelConfig.write_scale`)."""

    def __init__(self, write_scale: float) -> None:
        super().__init__()
        self.write_scale = write_scale

    def scale(self, h: torch.Tensor) -> torch.Tensor:
        return h * self.write_scale

    def extra_repr(self) -> str:
        return f"write_scale={self.write_scale:.6g}"


class ReZeroResidual(Residual):
    """x <- x + a * F(x), one learnable scalar a per write, initialised to 0.

    At init every write is exactly zero, so the whole stack is the identity map and
    the gradient reaches the embedding untouched; training opens each write as it
    becomes useful (Bachlechner et al. 2020, eq. 3, without a norm in the block).
    """

    def __init__(self) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(()))

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.alpha)

    def scale(self, h: torch.Tensor) -> torch.Tensor:
        return self.alpha * h


class DeepNormResidual(Residual):
    """x <- LN(alpha * x + F(x)): Post-LN with the stream up-weighted, and a smaller init.

    Wang, Ma, Dong, Huang, Zhang, Wei 2022, "DeepNet: Scaling Transformers to 1,000
    Layers" (arXiv:2203.00555), eq. in section 2 (DeepNorm): x_{l+1} = LN(alpha x_l +
    G_l(x_l, theta_l)); its pseudocode (Figure 2) and Table 1 give, for a decoder-only
    model of N layers,
        alpha = (2N)^(1/4),   beta = (8N)^(-1/4),
    beta being the gain of the init of the value and output projections of attention
    and of the FFN matrices (q and k keep gain 1), as microsoft/torchscale applies it
    (`deepnorm`: those weights divided by (8N)^(1/4) after init). As in the paper, every
    linear starts from Xavier-normal (`init_base`; times init_gain) and those ones are
    multiplied by beta; the GPT-2 1/sqrt(2L) rule of `scaled_init` is not applied on top
    (DeepNet's beta is its depth rule, `ModelConfig.out_proj_std`). The Xavier base matters:
    beta times our 0.02 init (about 0.0045 at 48 layers, d 128) left DeepNorm on the unigram
    plateau at every lr scanned, while Xavier x beta (about 0.02) trains (frontier_arms.py).
    The LN is the block's post-norm slot (placement=post); alpha and beta bound the
    model update, which is what lets the paper train Post-LN at depth.
    """

    BETA_PROJECTIONS = ("v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    def __init__(self, n_layers: int, gain: float = 1.0) -> None:
        super().__init__()
        self.alpha, self.beta = deepnorm_constants(n_layers)
        self.gain = gain  # model.init_gain

    def init_base(self, linear: nn.Linear, std: float) -> float:
        """Xavier-normal, sqrt(2 / (fan_in + fan_out)), times init_gain: the paper's base."""
        return self.gain * math.sqrt(2.0 / (linear.in_features + linear.out_features))

    def forward(self, stream: torch.Tensor, write: torch.Tensor) -> torch.Tensor:
        return stream * self.alpha + write

    def init_scale(self, param_name: str) -> float:
        return self.beta if param_name.endswith(self.BETA_PROJECTIONS) else 1.0

    def extra_repr(self) -> str:
        return f"alpha={self.alpha:.6g}, beta={self.beta:.6g}"


def deepnorm_constants(n_layers: int) -> tuple[float, float]:
    """DeepNet's decoder-only (alpha, beta) for N layers: ((2N)^(1/4), (8N)^(-1/4))."""
    return math.pow(2 * n_layers, 0.25), math.pow(8 * n_layers, -0.25)


RESIDUAL_BUILDERS = {
    "none": lambda cfg: NoResidual(),
    "plain": lambda cfg: Residual(),
    "scaled": lambda cfg: ScaledResidual(cfg.write_scale),
    "rezero": lambda cfg: ReZeroResidual(),
    "deepnorm": lambda cfg: DeepNormResidual(cfg.n_layers, cfg.init_gain),
    "hc": lambda cfg: HyperConnection(cfg.d_model, cfg.streams, cfg.norm_eps),
    "mhc": lambda cfg: ManifoldHyperConnection(cfg.d_model, cfg.streams, cfg.norm_eps,
                                               cfg.init_std),
    "attnres": lambda cfg: AttentionResidual(cfg.d_model, cfg.norm_eps),
    "ngpt": lambda cfg: NGPTResidual(cfg.d_model),
}


def make_residual(cfg: ModelConfig) -> Residual:
    """One write's residual module for `cfg.residual` (validated with the config)."""
    return RESIDUAL_BUILDERS[cfg.residual](cfg)


__all__ = ["RESIDUAL_BUILDERS", "Residual", "make_residual", "stream_view"]
