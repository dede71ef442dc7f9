"""Gated DeltaNet: the linear-attention mixer of the lesson's anchor (Qwen3.5's 3 of 4 layers).

Where softmax attention keeps every earlier key and value, a DeltaNet layer keeps one
matrix per head, the state S [Dk, Dv], and each token *edits* it. The gated delta rule
(Yang, Kautz, Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta Rule",
ICLR 2025, arXiv:2412.06464), written for S [Dk, Dv] and o_t = S_t^T q_t:

    S_t = S_{t-1} exp(g_t) - beta_t k_t (k_t^T S_{t-1} exp(g_t) - v_t^T)

the transpose of the paper's S_t = S_{t-1} a_t (I - beta_t k_t k_t^T) + beta_t v_t k_t^T:
first forget (the decay exp(g_t) in (0, 1]), then read what the state already says for
k_t, and write back beta_t times the error v_t - S^T k_t (the delta rule of Widrow-Hoff,
Schlag et al. 2021). `recurrent_gated_delta_rule` is that loop, one token at a time: what
a decode step runs.

Training and prefill run the same arithmetic in chunks of C = 64 tokens (Yang, Wang,
Zhang, Shen, Kim, "Parallelizing Linear Transformers with the Delta Rule over Sequence
Length", NeurIPS 2024, arXiv:2406.06484): inside a chunk the C writes u_i solve one unit
lower-triangular system (the WY / UT transform), so a chunk is a handful of matmuls and
only the chunk-to-chunk state update is sequential (`chunked_gated_delta_rule`).

Around the rule, as in Qwen3.5 (transformers' Qwen3_5GatedDeltaNet): one projection to
q, k, v (`in_proj_qkv`), one to the output gate z, one each to b and a (per value head); a
depthwise causal convolution (kernel `model.linear_conv_kernel`) with SiLU over q, k, v;
q and k L2-normalised per head (eps 1e-6), q times 1/sqrt(Dk); the decay
g = -exp(A_log) * softplus(a + dt_bias) and write strength beta = sigmoid(b); each value
head's output through a gated RMSNorm, RMSNorm(o) * w * SiLU(z); then `out_proj`.

Shape legend: B batch, T tokens, D d_model, Hk key heads, Hv value heads (a multiple of
Hk: each key head serves Hv/Hk consecutive value heads), Dk / Dv key / value head size,
C chunk length, N chunks, K conv kernel. q, k [B, Hv, T, Dk] (after the repeat); v, out
[B, Hv, T, Dv]; g, beta [B, Hv, T]; state S [B, Hv, Dk, Dv]; conv state [B, 2HkDk+HvDv, K-1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.config import DELTANET_CHUNK as CHUNK  # 64: the papers' kernels', transformers'
from depthlab.config import ModelConfig
from depthlab.hooks import HookPoint

L2_EPS = 1e-6  # q, k / sqrt(sum(x^2) + eps): FLA's l2norm, which transformers follows


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """x / sqrt(||x||^2 + 1e-6) over the last axis (FLA's and transformers' form)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def recurrent_gated_delta_rule(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule one token at a time: (out [B, H, T, Dv], final state).

    q, k [B, H, T, Dk] (q already scaled), v [B, H, T, Dv], g (log decay, <= 0) and beta
    [B, H, T]; state [B, H, Dk, Dv] or None (zeros)."""
    B, H, T, Dk = k.shape
    S = q.new_zeros(B, H, Dk, v.shape[-1]) if state is None else state
    outs = []
    for t in range(T):
        k_t, v_t = k[:, :, t], v[:, :, t]  # [B, H, Dk], [B, H, Dv]
        S = S * g[:, :, t].exp()[..., None, None]  # forget
        predicted = torch.einsum("bhk,bhkv->bhv", k_t, S)  # what S already says for k_t
        u = beta[:, :, t, None] * (v_t - predicted)  # the correction, times beta
        S = S + k_t[..., :, None] * u[..., None, :]  # write it at k_t
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], S))  # read with q_t
    return torch.stack(outs, dim=2), S


def chunked_gated_delta_rule(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    state: torch.Tensor | None = None, chunk: int = CHUNK,
    state_norms: list[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same rule as `recurrent_gated_delta_rule`, C tokens at a time.

    Inside a chunk starting from state S0, with G_i = g_1 + ... + g_i (log decay so far)
    and W_ij = exp(G_i - G_j) for j <= i, the writes u_i = beta_i (v_i - S_{i-1}'^T k_i)
    satisfy
        u_i + beta_i sum_{j<i} W_ij (k_i . k_j) u_j = beta_i v_i - beta_i exp(G_i) S0^T k_i,
    a unit lower-triangular system (I + A) U = V_beta - K_beta,decayed S0: solved once
    per chunk (the UT transform). Then every output and the next state are matmuls:
        o_i = exp(G_i) S0^T q_i + sum_{j<=i} W_ij (q_i . k_j) u_j
        S_C = exp(G_C) S0 + sum_j exp(G_C - G_j) k_j u_j^T.
    T is padded to a multiple of C with g = 0, beta = 0, k = 0 (no write, no decay).
    state_norms: when a list, ||S||_F [B, H] after each chunk is appended to it."""
    B, H, T, Dk = k.shape
    Dv = v.shape[-1]
    pad = (-T) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    N = (T + pad) // chunk
    # contiguous chunks: the batched matmuls below run several times slower on the strided
    # views a [B, T, H, D] -> [B, H, T, D] transpose leaves
    q, k, v = (x.contiguous().reshape(B, H, N, chunk, x.shape[-1]) for x in (q, k, v))
    g, beta = g.reshape(B, H, N, chunk), beta.reshape(B, H, N, chunk)

    # G [B, H, N, C]: log decay from the chunk's start to each token. In float64: with fast
    # heads (g ~ -20 a token) G reaches -1,000 within a chunk, and G_i - G_j in float32
    # would lose ~1e-4 of each decay W_ij to the cancellation (MPS has no float64: there
    # the cancellation stays).
    G64 = g.to(torch.float32 if g.device.type == "mps" else torch.float64).cumsum(-1)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=k.device).tril()
    # W_ij = exp(G_i - G_j) on and below the diagonal, 0 above (masked before exp: G_i - G_j
    # > 0 there and could overflow)
    W = (G64[..., :, None] - G64[..., None, :]).masked_fill(~causal, float("-inf")).exp()
    W, G = W.to(k.dtype), G64.to(k.dtype)
    k_beta = k * beta[..., None]
    system = (k_beta @ k.transpose(-1, -2)) * W  # A, with beta_i k_i.k_i on the diagonal
    # (I + strictly lower part of A)^-1 applied to the right-hand sides at once. The second,
    # the reads of S0, only where there is an S0 to read: with no state given the first
    # chunk starts from zeros, so a single chunk (a training step at context <= 64) has none
    reads = state is not None or N > 1
    rhs = v * beta[..., None]
    if reads:
        rhs = torch.cat([rhs, k_beta * G.exp()[..., None]], dim=-1)
    solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    u_fresh, k_reads = solved.split([Dv, Dk], dim=-1) if reads else (solved, solved)
    scores = (q @ k.transpose(-1, -2)) * W  # [B, H, N, C, C]
    q_decayed = q * G.exp()[..., None] if reads else q  # reads S0 through exp(G_i)
    k_to_end = k * (G64[..., -1:] - G64).exp().to(k.dtype)[..., None]  # k_j decayed to the end
    chunk_decay = G[..., -1].exp()[..., None, None]  # [B, H, N, 1, 1]

    S = state  # None: zeros, whose products the first chunk skips (the same numbers)
    outs = []
    # the chunks as separate tensors (unbind, not indexing: the backward of an index makes
    # a zero tensor of the whole size per chunk, which cost more than the chunks' matmuls)
    per_chunk = (t.unbind(2) for t in (u_fresh, k_reads, q_decayed, scores, chunk_decay,
                                       k_to_end.transpose(-1, -2)))
    for u_n, reads_n, q_n, scores_n, decay_n, k_end_n in zip(*per_chunk, strict=True):
        if S is None:
            u = u_n
            outs.append(scores_n @ u)
            S = k_end_n @ u
        else:
            u = u_n - reads_n @ S  # [B, H, C, Dv]: this chunk's writes, given the state before it
            outs.append(q_n @ S + scores_n @ u)
            S = S * decay_n + k_end_n @ u
        if state_norms is not None:
            state_norms.append(torch.linalg.vector_norm(S, dim=(-2, -1)))
    if S is None:  # no tokens
        S = q.new_zeros(B, H, Dk, Dv)
    out = torch.cat(outs, dim=2)[:, :, :T]
    return out, S


class GatedRMSNorm(nn.Module):
    """RMSNorm(x) * w * SiLU(z) over one value head (w starts at 1; statistics in float32):
    the output gate of Qwen3.5's DeltaNet layers (transformers' Qwen3_5RMSNormGated)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * h.to(x.dtype) * F.silu(z.float())).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


@dataclass
class DeltaState:
    """One DeltaNet layer's decode cache: the last K-1 conv inputs [B, C, K-1] and the
    delta-rule state S [B, Hv, Dk, Dv]; None before the first token."""

    conv: torch.Tensor | None = None
    S: torch.Tensor | None = None


class GatedDeltaNet(nn.Module):
    """x [B, T, D] -> [B, T, D]; the parameter names are transformers' (Qwen3_5GatedDeltaNet)."""

    # What a caller asking this layer for attention's hook points is told (depthlab.hooks)
    MISSING_HOOK_WHY = {"hook_pattern": "a Gated DeltaNet layer (model.layer_pattern letter L), "
                        "which mixes tokens through its state and has no attention map"}

    def __init__(self, cfg: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_k, self.n_v = cfg.linear_k_heads, cfg.linear_v_heads
        self.d_k, self.d_v = cfg.linear_k_dim, cfg.linear_v_dim
        self.kernel = cfg.linear_conv_kernel
        key_dim, value_dim = self.n_k * self.d_k, self.n_v * self.d_v
        self.widths = [key_dim, key_dim, value_dim]
        conv_dim = sum(self.widths)
        self.in_proj_qkv = nn.Linear(d, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(d, value_dim, bias=False)
        self.in_proj_b = nn.Linear(d, self.n_v, bias=False)
        self.in_proj_a = nn.Linear(d, self.n_v, bias=False)
        # depthwise: one K-tap filter per channel of q, k, v; weight [C, 1, K] as transformers'
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, self.kernel, groups=conv_dim, bias=False)
        self.A_log = nn.Parameter(torch.zeros(self.n_v))
        self.dt_bias = nn.Parameter(torch.ones(self.n_v))
        self.norm = GatedRMSNorm(self.d_v, cfg.norm_eps)
        self.out_proj = nn.Linear(value_dim, d, bias=False)
        self.recurrent = False  # True: the token loop even for T > 1 (tests, the bench)
        for name in ("q", "k", "v", "decay", "beta", "state_norm", "z"):
            setattr(self, f"hook_{name}", HookPoint())
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """What `init_weights` leaves to the layer (it initialises the linears): the conv
        as PyTorch's default for a K-tap filter, uniform(+-1/sqrt(K)); A ~ uniform(0.01,
        16) stored as log A and dt_bias = 1 (transformers' Qwen3.5 init), so each value
        head starts with its own forgetting rate; the gated norm's w = 1."""
        bound = 1.0 / math.sqrt(self.kernel)
        with torch.no_grad():
            nn.init.uniform_(self.conv1d.weight, -bound, bound)
            self.A_log.copy_(torch.empty_like(self.A_log).uniform_(0.01, 16).log())
            nn.init.ones_(self.dt_bias)
        self.norm.reset_parameters()

    def convolve(self, x: torch.Tensor, state: DeltaState | None) -> torch.Tensor:
        """Causal depthwise conv + SiLU over [B, T, C] (tokens second, as the projections
        give them), after the cached last K-1 inputs (zeros at the start); the cache keeps
        the new last K-1 ([B, C, K-1], transformers' layout).

        The conv is K shifted multiply-adds, out_t = sum_j w_j x_{t-K+1+j}: the sum
        F.conv1d(groups=C) makes, read on the layout the projections give (no transposes
        around it). bench/deltanet_step.py times both forms side by side: about the same
        on a CPU (0.94-1.08x), so this form is kept for being the formula as written."""
        B, T, C = x.shape
        K = self.kernel
        past = None if state is None else state.conv
        past = x.new_zeros(B, K - 1, C) if past is None else past.transpose(1, 2)
        full = torch.cat([past, x], dim=1)  # [B, K-1+T, C]
        if state is not None:
            state.conv = full[:, full.shape[1] - (K - 1):].transpose(1, 2)
        w = self.conv1d.weight[:, 0]  # [C, K]
        out = full[:, :T] * w[:, 0]
        for j in range(1, K):
            out = out + full[:, j:j + T] * w[:, j]
        return F.silu(out)

    def forward(self, x: torch.Tensor, rope: object = None, state: DeltaState | None = None,
                v_first: torch.Tensor | None = None, tokens: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [B, T, D] -> ([B, T, D], v_first): the call `Block` makes of any mixer. A DeltaNet
        layer needs no positions (`rope`) and no token ids, and hands `v_first` on untouched;
        `state` (decode) is read and advanced in place."""
        return self.mix(x, state), v_first

    def mix(self, x: torch.Tensor, state: DeltaState | None = None) -> torch.Tensor:
        """x [B, T, D] -> [B, T, D]; `state` (decode) is read and advanced in place."""
        B, T, _ = x.shape
        qkv = self.convolve(self.in_proj_qkv(x), state)
        q, k, v = qkv.split(self.widths, dim=-1)
        q = q.reshape(B, T, self.n_k, self.d_k)
        k = k.reshape(B, T, self.n_k, self.d_k)
        v = v.reshape(B, T, self.n_v, self.d_v)
        group = self.n_v // self.n_k  # each key head serves `group` consecutive value heads
        q, k = (t.repeat_interleave(group, dim=2) if group > 1 else t for t in (q, k))
        q, k, v = (t.transpose(1, 2).float() for t in (q, k, v))  # [B, Hv, T, *], float32
        q = l2_normalize(q) / math.sqrt(self.d_k)
        k = l2_normalize(k)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        a, b = self.in_proj_a(x).float(), self.in_proj_b(x).float()
        g = -self.A_log.float().exp() * F.softplus(a + self.dt_bias)  # log decay, <= 0
        g = self.hook_decay(g.transpose(1, 2))  # [B, Hv, T]
        beta = self.hook_beta(torch.sigmoid(b).transpose(1, 2))
        S0 = None if state is None else state.S
        norms: list[torch.Tensor] | None = [] if self.hook_state_norm.active else None
        if self.recurrent or T == 1:
            out, S = recurrent_gated_delta_rule(q, k, v, g, beta, S0)
            if norms is not None:
                norms.append(torch.linalg.vector_norm(S, dim=(-2, -1)))
        else:
            out, S = chunked_gated_delta_rule(q, k, v, g, beta, S0, state_norms=norms)
        if norms is not None:
            self.hook_state_norm(torch.stack(norms, dim=-1))  # [B, Hv, chunks]
        if state is not None:
            state.S = S
        z = self.hook_z(self.in_proj_z(x).reshape(B, T, self.n_v, self.d_v))
        out = self.norm(out.transpose(1, 2).to(x.dtype), z)  # [B, T, Hv, Dv]
        return self.out_proj(out.reshape(B, T, self.n_v * self.d_v))
