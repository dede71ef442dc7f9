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
  hc      n copies of the stream [B, T, n, D], static + dynamic width/depth connections
          (Zhu et al., ICLR 2025; depthlab.model.hyper)
  mhc     hc with a doubly stochastic mixing matrix by Sinkhorn-Knopp (DeepSeek, mHC;
          depthlab.model.hyper)
  attnres each read a softmax mix over depth of all earlier writes, the stream being
          their history [B, T, k, D] (Kimi, Attention Residuals; depthlab.model.depth_attention)
"""

from __future__ import annotations

import torch
from torch import nn

from depthlab.config import ModelConfig
from depthlab.model.depth_attention import AttentionResidual
from depthlab.model.hyper import HyperConnection, ManifoldHyperConnection


class Residual(nn.Module):
    """x <- x + F(x). Subclasses change one of read / scale / forward (or open / close)."""

    write_index = 0  # which write of the stack this is (set by the Transformer)

    def open(self, x: torch.Tensor) -> torch.Tensor:
        """The embedding [B, T, D] -> the stream the first block reads."""
        return x

    def close(self, stream: torch.Tensor) -> torch.Tensor:
        """The last stream -> [B, T, D] for the final norm and the LM head."""
        return stream

    def read(self, stream: torch.Tensor) -> torch.Tensor:
        return stream

    def scale(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def forward(self, stream: torch.Tensor, write: torch.Tensor) -> torch.Tensor:
        return stream + write


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


RESIDUAL_BUILDERS = {
    "none": lambda cfg: NoResidual(),
    "plain": lambda cfg: Residual(),
    "scaled": lambda cfg: ScaledResidual(cfg.write_scale),
    "rezero": lambda cfg: ReZeroResidual(),
    "hc": lambda cfg: HyperConnection(cfg.d_model, cfg.streams, cfg.norm_eps),
    "mhc": lambda cfg: ManifoldHyperConnection(cfg.d_model, cfg.streams, cfg.norm_eps,
                                               cfg.init_std),
    "attnres": lambda cfg: AttentionResidual(cfg.d_model, cfg.norm_eps),
}


# Residuals with parameters: `init_weights` calls their reset_parameters.
RESIDUAL_PARAMETERS = (ReZeroResidual, HyperConnection, ManifoldHyperConnection,
                       AttentionResidual)


def stream_view(x: torch.Tensor) -> torch.Tensor:
    """Any residual's stream as one [B, T, D] stream, for probes that measure it.

    A single stream is itself. A widened one ([B, T, n, D]: the n copies of hc/mhc, or
    attnres's history of k entries) becomes the sum along its third axis: what the
    model itself reads out at the end (`close`). Chosen over the mean or an RMS over
    copies because it is the stream the final norm would see if the stack stopped
    here, because it is linear and keeps signs (token collapse, cosines), and because
    it is the plain stream exactly for attnres at init. For hc/mhc at init the n copies
    are (nearly) equal, so it is n times plain's stream; gradient norms are taken of
    the wide stream itself, over all its entries.
    """
    return x if x.ndim == 3 else x.sum(dim=-2)


def make_residual(cfg: ModelConfig) -> Residual:
    """One write's residual module for `cfg.residual` (validated with the config)."""
    return RESIDUAL_BUILDERS[cfg.residual](cfg)
