"""Causal multi-head self-attention with RoPE, grouped-query heads, optional
QK-norm and an optional sigmoid output gate.

Shape legend: B batch, T tokens, D d_model, H query heads, K key/value heads,
E head size. q [B, H, T, E]; k, v [B, K, T, E] repeated to H heads; scores and
pattern [B, H, T, T].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.config import ModelConfig
from depthlab.hooks import HookPoint
from depthlab.model.norms import make_norm


def rope_cos_sin(
    n_tokens: int, head_size: int, theta: float, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables [T, E] for RoPE (Su et al. 2021), in Hugging Face's layout:
    the frequencies for the first half of a head are repeated for the second half."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_size, 2, dtype=torch.float64, device=device) / head_size
    )
    positions = torch.arange(n_tokens, dtype=torch.float64, device=device)
    angles = torch.outer(positions, inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (i, i + E/2) of x [B, heads, T, E] by position * frequency_i."""
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_size = cfg.n_heads, cfg.kv_heads, cfg.head_size
        self.use_rope = cfg.position == "rope"
        self.gated = cfg.attn_gate
        q_width = cfg.n_heads * cfg.head_size * (2 if cfg.attn_gate else 1)
        kv_width = cfg.kv_heads * cfg.head_size
        self.q_proj = nn.Linear(cfg.d_model, q_width, bias=cfg.bias or cfg.qkv_bias)
        self.k_proj = nn.Linear(cfg.d_model, kv_width, bias=cfg.bias or cfg.qkv_bias)
        self.v_proj = nn.Linear(cfg.d_model, kv_width, bias=cfg.bias or cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_size, cfg.d_model, bias=cfg.bias)
        # QK-norm (Dehghani et al. 2023; Qwen3): normalise each head's q and k before RoPE.
        self.q_norm = make_norm(cfg.norm, cfg.head_size, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = make_norm(cfg.norm, cfg.head_size, cfg.norm_eps) if cfg.qk_norm else None
        self.hook_q = HookPoint()
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_pattern = HookPoint()  # softmax weights [B, H, T, T]
        self.hook_z = HookPoint()  # heads' output, concatenated, before o_proj [B, T, H*E]
        self.need_weights = False  # set by callers that want the explicit path

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        B, T, _ = x.shape
        H, K, E = self.n_heads, self.n_kv_heads, self.head_size
        q = self.q_proj(x)
        gate = None
        if self.gated:
            # Qwen3-Next layout: per head, [query (E) | gate (E)].
            q, gate = q.view(B, T, H, 2 * E).chunk(2, dim=-1)
            gate = gate.reshape(B, T, H * E)
        q = q.reshape(B, T, H, E)
        k = self.k_proj(x).view(B, T, K, E)
        v = self.v_proj(x).view(B, T, K, E)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, heads, T, E]
        if self.use_rope and rope is not None:
            cos, sin = rope
            q, k = apply_rope(q, cos[:T], sin[:T]), apply_rope(k, cos[:T], sin[:T])
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        if K != H:  # grouped-query attention: each K/V head serves H/K query heads
            k = k.repeat_interleave(H // K, dim=1)
            v = v.repeat_interleave(H // K, dim=1)

        if self.need_weights or self.hook_pattern.active:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(E)
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
            pattern = self.hook_pattern(scores.softmax(dim=-1))
            out = pattern @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)

        out = self.hook_z(out.transpose(1, 2).reshape(B, T, H * E))
        if gate is not None:
            out = out * torch.sigmoid(gate)  # Qiu et al. 2025: lets a head write ~nothing
        return self.o_proj(out)
