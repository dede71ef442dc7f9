"""The residual interface every entry of the registry (depthlab.model.residual) implements.

Kept apart from the registry so that the designs living in modules of their own
(depthlab.model.hyper, depthlab.model.depth_attention) subclass it while the registry
imports them: the imports go one way.
"""

from __future__ import annotations

import torch
from torch import nn


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

    def init_base(self, linear: nn.Linear, std: float) -> float:
        """The std a linear's init starts from (`init_weights` asks): the model's `std`, or
        a design's own base init (deepnorm's Xavier-normal)."""
        return std

    def init_scale(self, param_name: str) -> float:
        """Factor on the init std of the linear `param_name` (`init_weights` asks): 1, or
        a design's own init rule (deepnorm's beta)."""
        return 1.0


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
