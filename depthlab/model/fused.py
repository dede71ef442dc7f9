"""Training fast paths on CPU, with their gradients written out, beside the readable layers.

The layers (attention.py, ffn.py, norms.py) keep their formulas as the reference. On
CPU, PyTorch's autograd runs some of them as chains of small ops, each a pass over memory
and a fresh allocation: RoPE on a strided q and k costs a copy, a cat, a negation and two
products each way, or, written half by half, runs loops of 16 floats; F.rms_norm's
backward is a dozen ops; and the tanh form of GELU goes through ATen's tanh, several
times slower on CPU than its sigmoid. Each function here computes the same values in
fewer passes or cheaper ones, with its gradient written out by hand, and is used only
where `fast_path_ok` holds (CPU, gradients on, float32 or float64) and, for RoPE, where
the config is one it computes (`ROTARY_IMPLEMENTS`, checked by depthlab.model.support:
any other switch takes the readable path, with its reason). tests/test_fused.py checks
values, gradients and whole training runs against the readable path;
bench/step_cost.py measures the whole step, and `--without rope|rmsnorm` is the
interleaved A/B that keeps each function here. (SwiGLU's SiLU(gate) * up with both
gradients written into one buffer, no cat, measured 0.99-1.00x of autograd's inside a
step, so it is not here.)
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from depthlab.config import ModelConfig
from depthlab.model.support import ANY, config_reason

# What `rotary_heads` replaces is Attention's projection output -> heads -> RoPE on q, k:
# the fields it computes, with their values. A new field falls back until it is listed
# here or in ROTARY_EXEMPT (tests/test_fused.py walks ModelConfig's fields).
ROTARY_IMPLEMENTS: dict[str, frozenset | None] = {
    "d_model": ANY, "n_heads": ANY, "n_kv_heads": ANY, "head_dim": ANY,  # read from y's width
    "position": frozenset({"rope"}), "rope_theta": ANY,  # the cos, sin tables come in
    "bias": ANY, "qkv_bias": ANY,  # added by the projection, before the function
    "attn_gate": frozenset({False}),  # the gate's half of q would be rotated as a query
    "qk_norm": frozenset({False}),  # the norm sits between the projection and RoPE
    "rope_fraction": frozenset({1.0}),  # it rotates every channel of a head
}
# Fields that never reach that part: they act on the stream before the attention reads
# it, after q, k, v leave the function (the value residual mixes v afterwards, a value
# embedding is added to v afterwards, nGPT's residual puts q and k on the sphere
# afterwards, reading its per-dimension scale in their paired order), or set where
# weights start. The stream shortcuts
# (x0_mix, backout, smear, unet_skips) mix the stream between blocks and the softcap
# acts on the logits. `norm` reaches q and k only through QK-norm, declared above.
ROTARY_EXEMPT = frozenset({
    "vocab_size", "context_len", "n_layers", "d_ff", "ffn", "ffn_clamp", "norm", "norm_eps",
    "placement", "residual", "norm_scale", "value_residual", "streams", "final_norm",
    "tie_embeddings", "init_std", "init_gain", "scaled_init",
    "x0_mix", "backout", "value_embeds", "smear", "unet_skips", "logit_softcap",
    # the DeltaNet layers' own fields: an attention layer, the only one this path runs,
    # is the same whatever they are
    "mixer", "layer_pattern", "linear_key_heads", "linear_value_heads", "linear_key_dim",
    "linear_value_dim", "linear_conv_kernel"})


def rotary_reason(cfg: ModelConfig) -> str | None:
    """Why `rotary_heads` cannot compute this config's attention, or None when it can."""
    return config_reason(cfg, ROTARY_IMPLEMENTS, "the fused RoPE path", exempt=ROTARY_EXEMPT)


def fast_path_ok(x: torch.Tensor) -> bool:
    """Training on CPU in full precision: where the functions below beat autograd's."""
    return (x.device.type == "cpu" and torch.is_grad_enabled()
            and x.dtype in (torch.float32, torch.float64))


def pair_halves(w: torch.Tensor, heads: int) -> torch.Tensor:
    """A q or k projection's rows (weight [heads * E, D] or bias [heads * E]) reordered
    within each head from (first half | second half) to the pairs RoPE rotates side by
    side: rows 0, E/2, 1, E/2 + 1, ... The projection then puts each pair (x_j, x_j+E/2)
    next to each other, where it reads as one complex number."""
    return w.unflatten(0, (heads, 2, -1)).transpose(1, 2).reshape(w.shape)


def _complex_pairs(t: torch.Tensor) -> torch.Tensor:
    """[..., E] real, pairs side by side -> [..., E/2] complex: a view, or of a copy where
    t's layout has no complex view (an incoming gradient can have any strides)."""
    if t.stride(-1) != 1 or any(s % 2 for s in (t.storage_offset(), *t.stride()[:-1])):
        t = t.contiguous()
    return torch.view_as_complex(t.unflatten(-1, (-1, 2)))


def rotary_turns(cos: torch.Tensor, sin: torch.Tensor,
                 heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """e^(i angle) for each pair of `heads` heads side by side [T, heads * E/2] (cos, sin
    [T, E], their halves equal), and its conjugate, the backward's rotation: what
    `rotary_heads` multiplies by. They depend only on the positions and the head count, so
    Attention keeps them from one step to the next."""
    E = cos.shape[-1]
    turn = torch.complex(cos[:, :E // 2], sin[:, :E // 2]).repeat(1, heads)
    return turn, turn.conj().resolve_conj()  # conjugated in memory: no per-element flag


class _RotaryHeads(torch.autograd.Function):
    """One matmul's output y [B, T, (H + 2K) * E], its q and k columns in pairs (see
    `pair_halves`) -> q [B, H, T, E], k [B, K, T, E] with RoPE applied, and v [B, K, T, E]:
    q and k as views of one fresh tensor, v a view of y.

    With each pair (x_j, x_j+E/2) read as one complex number, RoPE is one complex product
    by e^(i angle) over q and k together, with long contiguous rows. The paired order of
    a head's dimensions is the same for q and k, so every score q . k, and so attention's
    output, is what the head order gives (the sum taken in another order). The backward
    is the rotation by the opposite angle (the conjugate), written into one buffer shaped
    like y."""

    @staticmethod
    def forward(ctx: FunctionCtx, y: torch.Tensor, turn: torch.Tensor, back: torch.Tensor,
                n_q: int, n_kv: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, T, width = y.shape
        E = width // (n_q + 2 * n_kv)
        rotated = (n_q + n_kv) * E
        qk = torch.view_as_real(_complex_pairs(y[..., :rotated]) * turn)
        qk = qk.view(B, T, n_q + n_kv, E).transpose(1, 2)
        v = y[..., rotated:].view(B, T, n_kv, E).transpose(1, 2)
        ctx.save_for_backward(back)
        ctx.n_q = n_q
        return qk[:, :n_q], qk[:, n_q:], v

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, dq: torch.Tensor, dk: torch.Tensor,
                 dv: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (back,) = ctx.saved_tensors
        (B, n_q, T, E), n_kv = dq.shape, dk.shape[1]
        q_end, k_end = n_q * E // 2, back.shape[1]  # in complex pairs along a row of dy
        rotated = (n_q + n_kv) * E
        dy = dq.new_empty(B, T, rotated + n_kv * E)
        pairs = _complex_pairs(dy[..., :rotated])  # [B, T, (H + K) * E/2]
        # the incoming gradients as [B, T, heads * E/2]: whole rows per token, as back's
        torch.mul(_token_rows(dq), back[:, :q_end], out=pairs[..., :q_end])
        torch.mul(_token_rows(dk), back[:, q_end:], out=pairs[..., q_end:k_end])
        dy[..., rotated:].view(B, T, n_kv, E).copy_(dv.transpose(1, 2))
        return dy, None, None, None, None


def _token_rows(d: torch.Tensor) -> torch.Tensor:
    """A gradient [B, heads, T, E] -> [B, T, heads * E/2] complex pairs: a view where its
    memory is token-major, as SDPA's backward writes it, else of a copy."""
    return _complex_pairs(d.transpose(1, 2).reshape(d.shape[0], d.shape[2], -1))


def rotary_heads(y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_q: int, n_kv: int,
                 turns: tuple[torch.Tensor, torch.Tensor] | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused q|k|v projection's output, q and k rows in pairs (`pair_halves`) -> q, k
    (RoPE applied at the positions of cos, sin [T, E]; their dimensions in that paired
    order) and v, each [B, heads, T, E]: attention over them computes what
    Attention.heads's split, reshape, transpose and apply_rope give it. turns:
    `rotary_turns(cos, sin, n_q + n_kv)` when the caller keeps them."""
    if turns is None:
        turns = rotary_turns(cos, sin, n_q + n_kv)
    return _RotaryHeads.apply(y, *turns, n_q, n_kv)


GELU_C = math.sqrt(2.0 / math.pi)  # GELU's tanh form: z = GELU_C * (x + GELU_A * x^3)
GELU_A = 0.044715


class _GeluTanh(torch.autograd.Function):
    """GELU, tanh form: 0.5 x (1 + tanh(z)) = x * sigmoid(2z), since 0.5 (1 + tanh(z)) =
    sigmoid(2z); 2z = x * (2c + 2ca x^2) is one addcmul and one product, all in place
    after the first. The backward is ATen's own gelu_backward of the tanh form (a
    sigmoid-based backward was faster alone but slower inside a step: more passes over
    tensors that are no longer in cache)."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        two_c = x.new_full((), 2.0 * GELU_C)
        return torch.addcmul(two_c, x, x, value=2.0 * GELU_C * GELU_A).mul_(x).sigmoid_().mul_(x)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return torch.ops.aten.gelu_backward(g, x, approximate="tanh")


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """F.gelu(x, approximate="tanh"), forward through a sigmoid."""
    return _GeluTanh.apply(x)


def _fused_rms_forward():  # -> the op, or None
    """ATen's RMSNorm forward kernel (y and 1/rms in one call) where this torch has one that
    runs on CPU (PyTorch >= 2.8), tried once on a small tensor; else None."""
    try:
        op = torch.ops.aten._fused_rms_norm
        op(torch.ones(1, 2), [2], torch.ones(2), 1e-5)
    except (AttributeError, RuntimeError, NotImplementedError):
        return None
    return op


_FUSED_RMS_FORWARD = _fused_rms_forward()


class _RMSNorm(torch.autograd.Function):
    """y = x * r * w per row, r = 1 / sqrt(mean(x^2) + eps), with the backward written out.

    On CPU autograd differentiates F.rms_norm's composite (pow, mean, add, rsqrt, two
    products) op by op. The forward here is ATen's one-kernel `_fused_rms_norm` where
    this torch has it (PyTorch >= 2.8 on CPU: one pass for r, one for y, instead of six
    ops and five fresh tensors), else the same ops in the composite's order (x * x is
    pow(x, 2); mean is a sum divided by D); either way its values are bit for bit
    F.rms_norm's, those of inference and of every probe (tests/test_fused.py), and it
    keeps r. The backward is ATen's LayerNorm backward, one fused kernel, given mean 0 and
    rstd r: with g' = g * w it returns dw = sum over rows of g * x * r, RMSNorm's, and
    dx = r * g' - x * r^3 * sum(g' * x) / D - r * sum(g') / D: RMSNorm's dx but for the
    last term, LayerNorm's mean term, which adding r * (g @ w) / D per row takes back."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, weight: torch.Tensor,
                eps: float) -> torch.Tensor:
        if _FUSED_RMS_FORWARD is not None:
            y, r = _FUSED_RMS_FORWARD(x, [x.shape[-1]], weight, eps)
        else:
            y = x * x
            r = y.sum(-1, keepdim=True).div_(x.shape[-1]).add_(eps).rsqrt_()
            torch.mul(x, r, out=y).mul_(weight)
        ctx.save_for_backward(x, weight, r)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, r = ctx.saved_tensors
        D = x.shape[-1]
        dx, dw, _ = torch.ops.aten.native_layer_norm_backward(
            g, x, [D], torch.zeros_like(r), r, weight, None,
            [True, ctx.needs_input_grad[1], False])
        mean_term = (g @ weight).unsqueeze_(-1).mul_(r).mul_(1.0 / D)  # r * sum(g') / D
        return dx.add_(mean_term), dw, None  # (an addcmul_ of two [N, 1] runs unvectorized)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """F.rms_norm(x, x.shape[-1:], weight, eps), with the backward written out."""
    return _RMSNorm.apply(x, weight, eps)


def rms_norm_ok(x: torch.Tensor) -> bool:
    """Where `rms_norm` runs: training on CPU in full precision."""
    return fast_path_ok(x)
