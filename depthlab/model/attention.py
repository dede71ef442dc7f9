"""Causal multi-head self-attention with RoPE, grouped-query heads, optional
QK-norm and an optional sigmoid output gate.

Shape legend: B batch, T tokens, D d_model, H query heads, K key/value heads,
E head size, S tokens already in the KV cache. q [B, H, T, E]; k, v [B, K, S+T, E]
repeated to H heads; scores and pattern [B, H, T, S+T] (S = 0 without a cache).

Generation appends one token at a time: a `LayerCache` keeps the keys and values of
the tokens before it, so each new token costs one row of attention instead of a
forward pass over the whole prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.config import ModelConfig
from depthlab.hooks import HookPoint
from depthlab.model import fused
from depthlab.model.deltanet import DeltaState
from depthlab.model.ngpt import SphereQK
from depthlab.model.norms import make_norm
from depthlab.model.shortcuts import value_embedding


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
    """Rotate each pair (i, i + R/2) of x [B, heads, T, E] by position * frequency_i, R the
    width of cos, sin: the whole head, or its first R channels (partial RoPE, Qwen3.5's
    `partial_rotary_factor`; the other E - R pass unrotated)."""
    R = cos.shape[-1]
    if R == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    turned, passed = x[..., :R], x[..., R:]
    return torch.cat([turned * cos + rotate_half(turned) * sin, passed], dim=-1)


@dataclass
class LayerCache:
    """One layer's slice of a KV cache: keys and values [B, K, capacity, E], of which
    the first `start` slots hold earlier tokens. New tokens are written in place."""

    k: torch.Tensor
    v: torch.Tensor
    start: int = 0

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new tokens' k, v [B, K, T, E] after the earlier ones; return all S+T."""
        end = self.start + k.shape[2]
        if end > self.k.shape[2]:
            raise ValueError(f"KV cache holds {self.k.shape[2]} tokens; {end} needed")
        self.k[:, :, self.start:end] = k
        self.v[:, :, self.start:end] = v
        return self.k[:, :, :end], self.v[:, :, :end]


class KVCache:
    """Keys and values of every layer for up to `capacity` tokens of a batch of B rows.

    `length` slots are filled; the model's forward appends its T tokens to every
    layer and then advances `length` by T, so the next call's tokens sit after them.
    """

    def __init__(self, cfg: ModelConfig, batch: int, capacity: int, dtype: torch.dtype,
                 device: torch.device | str) -> None:
        kinds = cfg.layer_kinds
        n_attention = kinds.count("attention")
        shape = (n_attention, batch, cfg.kv_heads, capacity, cfg.head_size)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        # One view per attention layer, made once: a decode step does no per-layer slicing.
        # A Gated DeltaNet layer keeps its conv and delta-rule state instead (fixed size).
        kv = iter(LayerCache(k, v) for k, v in zip(self.k, self.v, strict=True))
        self._layers = [next(kv) if kind == "attention" else DeltaState() for kind in kinds]
        self.length = 0
        # model.smear: the last token's embedding, which the next token mixes in [B, 1, D]
        self.prev_embed: torch.Tensor | None = None

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def layer(self, i: int) -> LayerCache | DeltaState:
        layer = self._layers[i]
        if isinstance(layer, LayerCache):
            layer.start = self.length
        return layer


def causal_mask(n_new: int, n_past: int, device: torch.device) -> torch.Tensor:
    """[T, S+T] True where new token i (at cache slot S+i) may attend: slots <= S+i."""
    return torch.ones(n_new, n_past + n_new, dtype=torch.bool, device=device).tril(n_past)


class ValueResidual(nn.Module):
    """v_l <- lambda1 * v_l + lambda2 * v_1: this layer's values mixed with layer 0's.

    ResFormer, Zhou et al. 2024, "Value Residual Learning For Alleviating Attention
    Concentration In Transformers" (arXiv:2410.17897), the ResFormer update: U_n =
    A_n (lambda1 V_n + lambda2 V_1) for every layer n >= 2, so each later layer still
    attends over the first layer's token values. We take the learnable two-scalar form
    of modded-nanogpt (Keller Jordan et al., records from Nov 2024: `v = lambdas[0] * v
    + lambdas[1] * v1`, lambdas = [0.5, 0.5]): both start at 0.5, the paper's default
    lambda1 = lambda2 = 0.5, a real mix from the first step. Layer 0 has no mix: its V
    is V_1. With lambda1 = 1, lambda2 = 0 the layer computes what the baseline does.
    """

    LAMBDA_INIT = (0.5, 0.5)

    def __init__(self) -> None:
        super().__init__()
        self.lambdas = nn.Parameter(torch.tensor(self.LAMBDA_INIT))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.lambdas.copy_(torch.tensor(self.LAMBDA_INIT))

    def forward(self, v: torch.Tensor, v_first: torch.Tensor) -> torch.Tensor:
        return self.lambdas[0] * v + self.lambdas[1] * v_first

    def extra_repr(self) -> str:
        return f"lambda_init={self.LAMBDA_INIT}"


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_size = cfg.n_heads, cfg.kv_heads, cfg.head_size
        self.use_rope = cfg.position == "rope"
        # the training fast path's config story (None: it computes this config; else why not)
        self.rotary_fallback = fused.rotary_reason(cfg)
        self._rotary_turns: tuple | None = None  # (rope, its fused.rotary_turns), kept
        self.gated = cfg.attn_gate
        q_width = cfg.n_heads * cfg.head_size * (2 if cfg.attn_gate else 1)
        kv_width = cfg.kv_heads * cfg.head_size
        self.widths = [q_width, kv_width, kv_width]
        self.q_proj = nn.Linear(cfg.d_model, q_width, bias=cfg.bias or cfg.qkv_bias)
        self.k_proj = nn.Linear(cfg.d_model, kv_width, bias=cfg.bias or cfg.qkv_bias)
        self.v_proj = nn.Linear(cfg.d_model, kv_width, bias=cfg.bias or cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_size, cfg.d_model, bias=cfg.bias)
        # QK-norm (Dehghani et al. 2023; Qwen3): normalise each head's q and k before RoPE.
        self.q_norm = make_norm(cfg.norm, cfg.head_size, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = make_norm(cfg.norm, cfg.head_size, cfg.norm_eps) if cfg.qk_norm else None
        # nGPT: q, k on the sphere times s_qk, and scores times sqrt(E) (depthlab.model.ngpt).
        self.sphere_qk = (SphereQK(cfg.n_heads, cfg.head_size, cfg.d_model)
                          if cfg.on_sphere else None)
        self.softmax_scale = math.sqrt(cfg.head_size) if self.sphere_qk is not None else None
        self.hook_q = HookPoint()
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_pattern = HookPoint()  # softmax weights [B, H, T, S+T]
        self.hook_z = HookPoint()  # heads' output, concatenated, before o_proj [B, T, H*E]
        self.need_weights = False  # set by callers that want the explicit path
        # ResFormer: layer 0 hands its V on; every later layer mixes it into its own.
        self.hands_on_v = cfg.value_residual and layer == 0
        self.value_residual = ValueResidual() if cfg.value_residual and layer > 0 else None
        if self.value_residual is not None:
            self.hook_v_first = HookPoint()  # layer 0's V [B, K, T, E] as this layer mixes it
        # model.value_embeds: on every other layer, a gated table of values by token.
        self.value_embed = value_embedding(cfg, layer)
        if self.value_embed is not None:
            self.hook_value_embed = HookPoint()  # what it adds to V [B, K, T, E]

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q_proj(x), k_proj(x), v_proj(x). While training, as one matmul against the
        three weights stacked (one larger GEMM beats three small ones; autograd splits
        the gradient back). The parameters stay three, so checkpoints and Hugging Face
        names are those of separate projections."""
        if not torch.is_grad_enabled():  # inference: no per-call copy of the weights
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return self.project_stacked(x).split(self.widths, dim=-1)

    def project_stacked(self, x: torch.Tensor, paired: bool = False) -> torch.Tensor:
        """x @ [W_q; W_k; W_v].T (+ biases): the three projections side by side [B, T, *];
        paired: q's and k's columns in the pairs RoPE rotates (fused.pair_halves)."""
        projs = (self.q_proj, self.k_proj, self.v_proj)

        def stacked(name: str) -> torch.Tensor:
            q, k, v = (getattr(p, name) for p in projs)
            if paired:
                q, k = fused.pair_halves(q, self.n_heads), fused.pair_halves(k, self.n_kv_heads)
            return torch.cat([q, k, v])
        return F.linear(x, stacked("weight"), None if self.q_proj.bias is None else stacked("bias"))

    def rotary_fast_path(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None,
                         cache: LayerCache | None) -> bool:
        """Training on CPU, a config the fused path computes (`rotary_fallback` is None:
        RoPE, nothing between the projection and RoPE, see fused.ROTARY_IMPLEMENTS) and no
        hook on q, k, v: project with q's and k's rows in RoPE's pairs, then rotate and
        split the heads in one function with a hand-written backward
        (depthlab.model.fused.rotary_heads; q and k keep the paired order, which no
        score sees)."""
        return (self.rotary_fallback is None and rope is not None and rope[0].ndim == 2
                and cache is None and fused.fast_path_ok(x)
                and not any(p.hooked for p in (self.hook_q, self.hook_k, self.hook_v)))

    def rotary_turns(self, rope: tuple[torch.Tensor, torch.Tensor],
                     ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """fused.rotary_turns for these cos, sin, computed once while the model hands every
        step the same `rope` tuple (Transformer.rope keeps it) and reused; None (computed
        per call) under torch.compile, which traces it."""
        if torch.compiler.is_compiling():
            return None
        kept = self._rotary_turns
        if kept is None or kept[0] is not rope:
            kept = self._rotary_turns = (rope, fused.rotary_turns(*rope, self.n_heads
                                                                  + self.n_kv_heads))
        return kept[1]

    def heads(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None,
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """q, k, v [B, heads, T, E] with RoPE applied to q and k, and the output gate
        [B, T, H*E] (None without attn_gate)."""
        B, T, _ = x.shape
        H, K, E = self.n_heads, self.n_kv_heads, self.head_size
        q, k, v = self.project_qkv(x)
        gate = None
        if self.gated:
            # Qwen3-Next layout: per head, [query (E) | gate (E)].
            q, gate = q.reshape(B, T, H, 2 * E).chunk(2, dim=-1)
            gate = gate.reshape(B, T, H * E)
        q = q.reshape(B, T, H, E)
        k = k.reshape(B, T, K, E)
        v = v.reshape(B, T, K, E)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, heads, T, E]
        if self.use_rope and rope is not None:
            cos, sin = rope
            if T == 1:  # a decode step is bound by the number of ops: rotate q, k as one
                q, k = apply_rope(torch.cat([q, k], dim=1), cos, sin).split([H, K], dim=1)
            else:  # contiguous first: RoPE's elementwise ops run ~1.5x faster on CPU than
                # on the strided views, which more than pays for the copy (and, measured
                # with backward, beats rotating q and k as one concatenated tensor)
                q, k = apply_rope(q.contiguous(), cos, sin), apply_rope(k.contiguous(), cos, sin)
        return q, k, v, gate

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None,
                cache: LayerCache | None = None, v_first: torch.Tensor | None = None,
                tokens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [B, T, D] -> ([B, T, D], v_first). `rope` holds cos, sin at the T tokens'
        positions ([T, E], or [B, 1, T, E] when each row has its own); `cache` the earlier
        tokens. v_first: with value_residual, layer 0's V of these T tokens [B, K, T, E],
        returned by layer 0 and passed to every later one (None otherwise). Only the new
        tokens need it: the mix happens before the cache, so the cache of a later layer
        holds mixed values, and the first layer's V of the new tokens is the one layer 0
        just computed (and wrote to its own cache). tokens: the T tokens' ids [B, T], which
        a value embedding looks up (model.value_embeds)."""
        B, T, _ = x.shape
        H, K, E = self.n_heads, self.n_kv_heads, self.head_size
        if self.rotary_fast_path(x, rope, cache):  # the same q, k, v from one function
            q, k, v = fused.rotary_heads(self.project_stacked(x, paired=True), *rope, H, K,
                                         turns=self.rotary_turns(rope))
            gate, paired = None, True  # q's and k's head dimensions in RoPE's pairs
        else:
            q, k, v, gate = self.heads(x, rope)
            paired = False
        if self.value_embed is not None:
            if tokens is None:
                raise ValueError("model.value_embeds looks values up by token: pass the token ids")
            v = v + self.hook_value_embed(self.value_embed(tokens, x))
        if self.value_residual is not None:
            v = self.value_residual(v, self.hook_v_first(v_first))
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        if self.hands_on_v:
            v_first = v
        past = 0
        if cache is not None:
            past = cache.start
            k, v = cache.extend(k, v)
        if K != H:  # grouped-query attention: each K/V head serves H/K query heads
            k = k.repeat_interleave(H // K, dim=1)
            v = v.repeat_interleave(H // K, dim=1)
        if self.sphere_qk is not None:
            q, k = self.sphere_qk(q, paired), self.sphere_qk(k, paired)

        if self.need_weights or self.hook_pattern.active:
            scores = q @ k.transpose(-2, -1)
            scores = scores / math.sqrt(E) if self.softmax_scale is None else scores * self.softmax_scale
            scores = scores.masked_fill(~causal_mask(T, past, x.device), float("-inf"))
            pattern = self.hook_pattern(scores.softmax(dim=-1))
            out = pattern @ v
        elif past == 0:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale)
        else:  # one new token sees every slot; several need the offset causal mask
            mask = None if T == 1 else causal_mask(T, past, x.device)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.softmax_scale)

        out = self.hook_z(out.transpose(1, 2).reshape(B, T, H * E))
        if gate is not None:
            out = out * torch.sigmoid(gate)  # Qiu et al. 2025: lets a head write ~nothing
        return self.o_proj(out), v_first
