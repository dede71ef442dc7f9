"""The FFN registry: relu | gelu (two matrices) and swiglu (three matrices).

Shapes: x [B, T, D] -> hidden [B, T, F] -> out [B, T, D].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.config import ModelConfig
from depthlab.model import fused
from depthlab.model.ngpt import SwiGLUScales


class MLP(nn.Module):
    """down(act(up(x))): ReLU in Vaswani et al. 2017, GELU (tanh form) in GPT-2; d_ff = 4d."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.up_proj = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=cfg.bias)
        self.down_proj = nn.Linear(cfg.ffn_hidden, cfg.d_model, bias=cfg.bias)
        self.kind = cfg.ffn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up_proj(x)
        if self.kind == "relu":
            h = F.relu(h)
        elif fused.fast_path_ok(h):  # training on CPU: the same GELU, through a sigmoid
            h = fused.gelu_tanh(h)
        else:
            h = F.gelu(h, approximate="tanh")
        return self.down_proj(h)

    def extra_repr(self) -> str:
        return f"activation={self.kind}"


class SwiGLU(nn.Module):
    """down(SiLU(x W_gate) * (x W_up))   (Shazeer 2020).

    The output has no upper bound (SiLU(10) * 10 = 99.995), so `clamp` optionally
    limits the gate input from above and the up input on both sides, as gpt-oss
    does with limit 7.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=cfg.bias)
        self.up_proj = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=cfg.bias)
        self.down_proj = nn.Linear(cfg.ffn_hidden, cfg.d_model, bias=cfg.bias)
        self.clamp = cfg.ffn_clamp
        # nGPT: the gate and up projections times s_v * sqrt(d), s_u (depthlab.model.ngpt).
        self.scales = SwiGLUScales(cfg.ffn_hidden, cfg.d_model) if cfg.on_sphere else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Two matmuls, not one against both weights stacked: over a whole CPU training step
        # the stacked one measured slower, its 2 * d_ff wide output and the copy that
        # joins the two gradients costing more than one larger GEMM saves.
        gate, up = self.gate_proj(x), self.up_proj(x)
        if self.scales is not None:
            gate, up = self.scales(gate, up)
        if self.clamp is not None:
            gate = gate.clamp(max=self.clamp)
            up = up.clamp(-self.clamp, self.clamp)
        return self.down_proj(F.silu(gate) * up)

    def extra_repr(self) -> str:
        return f"clamp={self.clamp}"


FFN_CLASSES: dict[str, type[nn.Module]] = {"relu": MLP, "gelu": MLP, "swiglu": SwiGLU}


def make_ffn(cfg: ModelConfig) -> nn.Module:
    return FFN_CLASSES[cfg.ffn](cfg)
