"""Training fast paths on CPU, with their gradients written out, beside the readable layers.

The layers (attention.py, ffn.py) keep their formulas as the reference. On CPU, PyTorch's
autograd runs some of them as chains of small ops, each a pass over memory and a fresh
allocation: RoPE on a strided q and k costs a copy, a cat, a negation and two products
each way; and the tanh form of GELU goes through ATen's tanh, several times slower on
CPU than its sigmoid. Each function here computes the same values in fewer passes or
cheaper ones, with its gradient written out by hand, and is used only where
`fast_path_ok` holds (CPU, gradients on, float32 or float64) and, for RoPE, where the
config is one it computes (`ROTARY_IMPLEMENTS`, checked by depthlab.model.support: any
other switch takes the readable path, with its reason). tests/test_fused.py checks
values, gradients and whole training runs against the readable path;
bench/reference_loop.py measures the step. (A hand-written RMSNorm backward was twice as
fast as F.rms_norm's alone but gained nothing measurable inside a step, so it is not here.)
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
}
# Fields that never reach that part: they act on the stream before the attention reads
# it, after q, k, v leave the function (the value residual mixes v afterwards, a value
# embedding is added to v afterwards, nGPT's residual puts q and k on the sphere
# afterwards), or set where weights start. The stream shortcuts (x0_mix, backout, smear,
# unet_skips) mix the stream between blocks and the softcap acts on the logits. `norm`
# reaches q and k only through QK-norm, declared above.
ROTARY_EXEMPT = frozenset({
    "vocab_size", "context_len", "n_layers", "d_ff", "ffn", "ffn_clamp", "norm", "norm_eps",
    "placement", "residual", "norm_scale", "value_residual", "streams", "final_norm",
    "tie_embeddings", "init_std", "init_gain", "scaled_init",
    "x0_mix", "backout", "value_embeds", "smear", "unet_skips", "logit_softcap"})


def rotary_reason(cfg: ModelConfig) -> str | None:
    """Why `rotary_heads` cannot compute this config's attention, or None when it can."""
    return config_reason(cfg, ROTARY_IMPLEMENTS, "the fused RoPE path", exempt=ROTARY_EXEMPT)


def fast_path_ok(x: torch.Tensor) -> bool:
    """Training on CPU in full precision: where the functions below beat autograd's."""
    return (x.device.type == "cpu" and torch.is_grad_enabled()
            and x.dtype in (torch.float32, torch.float64))


def _rotate_into(out: torch.Tensor, x: torch.Tensor, cos: torch.Tensor,
                 sin: torch.Tensor) -> None:
    """out = x * cos + rotate_half(x) * sin, written half by half (no cat, no negation):
    first half x1 * c - x2 * s, second half x2 * c + x1 * s. cos, sin [T, 1, E/2]
    broadcast over x's [B, T, heads, E]; out may be a strided view."""
    h = x.shape[-1] // 2
    x1, x2, o1, o2 = x[..., :h], x[..., h:], out[..., :h], out[..., h:]
    torch.mul(x1, cos, out=o1)
    o1.addcmul_(x2, sin, value=-1.0)
    torch.mul(x2, cos, out=o2)
    o2.addcmul_(x1, sin)


class _RotaryHeads(torch.autograd.Function):
    """One matmul's output y [B, T, (H + 2K) * E] -> q [B, H, T, E], k [B, K, T, E] with
    RoPE applied, and v [B, K, T, E]; each a fresh contiguous tensor.

    RoPE is a rotation, so its backward is the rotation by the opposite angle (sin -> -sin);
    the three gradients are written straight into one buffer shaped like y."""

    @staticmethod
    def forward(ctx: FunctionCtx, y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                n_q: int, n_kv: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, T, width = y.shape
        E = width // (n_q + 2 * n_kv)
        heads = y.view(B, T, n_q + 2 * n_kv, E)
        h = E // 2
        cos, sin = cos[:, None, :h], sin[:, None, :h]  # halves are equal (HF layout)
        q = y.new_empty(B, n_q, T, E)
        k = y.new_empty(B, n_kv, T, E)
        _rotate_into(q.transpose(1, 2), heads[:, :, :n_q], cos, sin)
        _rotate_into(k.transpose(1, 2), heads[:, :, n_q:n_q + n_kv], cos, sin)
        v = heads[:, :, n_q + n_kv:].transpose(1, 2).contiguous()
        ctx.save_for_backward(cos, sin)
        ctx.n_q, ctx.n_kv = n_q, n_kv
        return q, k, v

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, dq: torch.Tensor, dk: torch.Tensor,
                 dv: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        cos, sin = ctx.saved_tensors
        n_q, n_kv = ctx.n_q, ctx.n_kv
        B, _, T, E = dq.shape
        dy = dq.new_empty(B, T, n_q + 2 * n_kv, E)
        _rotate_into(dy[:, :, :n_q], dq.transpose(1, 2), cos, -sin)
        _rotate_into(dy[:, :, n_q:n_q + n_kv], dk.transpose(1, 2), cos, -sin)
        dy[:, :, n_q + n_kv:] = dv.transpose(1, 2)
        return dy.view(B, T, -1), None, None, None, None


def rotary_heads(y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_q: int,
                 n_kv: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused q|k|v projection's output -> q, k (RoPE applied at the positions of cos,
    sin [T, E]) and v, each [B, heads, T, E]: what Attention.forward computes with
    split, reshape, transpose and apply_rope."""
    return _RotaryHeads.apply(y, cos, sin, n_q, n_kv)


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
