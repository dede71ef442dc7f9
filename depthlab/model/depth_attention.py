"""Attention over depth: each sublayer reads a softmax-weighted mix of all earlier writes.

Attention Residuals (Kimi Team, Moonshot AI, "Attention Residuals", arXiv 2603.15031,
2026). Unrolled, the plain residual stream is a sum with unit weights,
    x_l = v_0 + sum_{i<l} v_i         (v_0 the embedding, v_i the i-th write)
a depth-wise *linear* attention with every weight 1. AttnRes makes it softmax attention
over depth, with one learned pseudo-query w_l in R^D per sublayer and keys RMSNorm(v_i)
(so a large write cannot win by magnitude alone):
    a_{i->l} = softmax_i( w_l . RMSNorm(v_i) ),     x_l = sum_i a_{i->l} v_i
w_l starts at 0, so every a is uniform at init. DenseFormer (Pagliardini et al. 2024,
"DenseFormer: Enhancing Information Flow in Transformers via Depth Weighted
Averaging") is the static case: learned weights per (l, i), independent of the input.

At init the paper's read is the *mean* of the k entries, while plain reads their *sum*:
the same direction, 1/k the size. A Pre-Norm sublayer hardly sees the difference (its
RMSNorm removes the scale up to eps), but the stream's RMS, the final read and any
sublayer without an input norm do. So this module keeps plain's total weight: it reads
    x_l = k * sum_i a_{i->l} v_i      (weights k * a, summing to k like plain's k ones)
which is exactly the plain stream at init, and training moves weight between depths
without changing the total. The keys' RMSNorm has no scale of its own (a scale g
would only give another query, (g * w)).

The "stream" is the history of all entries, [B, T, k, D] (k = 1 + writes so far), laid
out like the hyper-connection copies; `forward` appends, `close` (the final read)
is the plain sum. The hook `*_residual.hook_depth_weights` shows a [B, T, k]. The first
sublayer's query never learns: its history is the embedding alone, and a softmax over
one entry is 1 (kept so that every write has the same parameters).
Each read keeps its own k-entry history for backward: memory grows as L^2 (the
paper's Block AttnRes attends over block sums to avoid that at scale).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.hooks import HookPoint
from depthlab.model.residual_base import Residual


class AttentionResidual(Residual):
    """`residual=attnres`: softmax attention over all earlier writes, equal to plain at init."""

    def __init__(self, d_model: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.query = nn.Parameter(torch.zeros(d_model))  # w_l, zero at init
        self.hook_depth_weights = HookPoint()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.query)

    def extra_repr(self) -> str:
        return f"query={list(self.query.shape)}"

    def open(self, x: torch.Tensor) -> torch.Tensor:
        """The embedding [B, T, D] -> a history of one entry [B, T, 1, D]."""
        return x.unsqueeze(-2)

    def close(self, stream: torch.Tensor) -> torch.Tensor:
        """The final read: the sum of all entries, as plain's stream."""
        return stream.sum(dim=-2)

    def read(self, stream: torch.Tensor) -> torch.Tensor:
        """x_l = k * sum_i softmax_i(w . RMSNorm(v_i)) v_i, [B, T, D].

        w . RMSNorm(v) is computed as (w . v) / rms(v), without writing out the
        normalised history."""
        inv_rms = torch.rsqrt(stream.square().mean(-1) + self.eps)
        logits = F.linear(stream, self.query.unsqueeze(0)).squeeze(-1) * inv_rms
        weights = self.hook_depth_weights(torch.softmax(logits, dim=-1))
        return stream.shape[-2] * (weights.unsqueeze(-2) @ stream).squeeze(-2)

    def scale(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def forward(self, stream: torch.Tensor, write: torch.Tensor) -> torch.Tensor:
        """Append the write: [B, T, k, D] -> [B, T, k + 1, D]."""
        return torch.cat([stream, write.unsqueeze(-2)], dim=-2)
