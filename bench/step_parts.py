"""The course preset's training step with one part written another way, side by side.

bench/step_cost.py compares the course step with the gpt2 preset's and turns a fused path
off. This script keeps the alternatives that were measured and not kept, so a change to
depthlab.model.fused or the layers can be measured against them again:

  stacked gate|up        SwiGLU's gate and up as one matmul against both weights stacked
                         (kept: two matmuls)
  rmsnorm passes         RMSNorm's backward as hand-written passes (p = g * x, two
                         matrix-vector products, three passes for dx), not LayerNorm's
                         backward kernel at mean 0
  rmsnorm vector norm    RMSNorm's forward from the vector norm: one reduction and two
                         passes instead of ATen's six small ops (faster, but its values
                         are no longer those of inference bit for bit)
  layernorm              model.norm=layernorm, PyTorch's own kernels called directly
  layernorm in Function  the same two kernels called from a Python autograd.Function:
                         what a hand-written backward pays for being Python

Every loop is `depthlab train`'s step (bench/reference_loop.py builds it) at the CPU
recipe's shape, one thread, malloc set as `depthlab train` sets it. Each round runs every
loop once, in alternating order, timed with time.thread_time; printed per loop: its
median step and the median, over rounds, of its step / the course step of the same round
(the quartiles beside it). < 1: faster than the course preset as it is.

    python bench/step_parts.py [--rounds 60]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import types
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from reference_loop import VOCAB, add_shape_args, depthlab_model, depthlab_step, shape_of
from torch.autograd.function import FunctionCtx, once_differentiable

from depthlab.model import Transformer, fused
from depthlab.model.ffn import SwiGLU
from depthlab.model.norms import LayerNorm, RMSNorm
from depthlab.train.runtime import keep_freed_memory


class _RMSNormPasses(torch.autograd.Function):
    """ATen's RMSNorm forward; the backward as passes: with p = g * x,
    dw = r @ p and dx = r * g * w - x * r^3 * (p @ w) / D."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        y, r = torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], w, eps)
        ctx.save_for_backward(x, w, r)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, w, r = ctx.saved_tensors
        D = x.shape[-1]
        x2, g2, r1 = x.reshape(-1, D), g.reshape(-1, D), r.reshape(-1)
        p = g2 * x2
        c = (p @ w).mul_(r1.pow(3)).mul_(-1.0 / D)
        dx = torch.mul(g2, w).mul_(r1[:, None]).addcmul_(x2, c[:, None])
        return dx.view(x.shape), r1 @ p, None


class _RMSNormVectorNorm(torch.autograd.Function):
    """r from the vector norm squared, y = x * r * w in two passes; the kept backward."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        D = x.shape[-1]
        r = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_()
        r = r.mul_(1.0 / D).add_(eps).rsqrt_()
        ctx.save_for_backward(x, w, r)
        return torch.mul(x, r).mul_(w)

    backward = fused._RMSNorm.backward


class _LayerNormInFunction(torch.autograd.Function):
    """LayerNorm's own forward and backward kernels, called from Python."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                eps: float) -> torch.Tensor:
        y, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], w, b, eps)
        ctx.save_for_backward(x, w, b, mean, rstd)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, w, b, mean, rstd = ctx.saved_tensors
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(
            g, x, [x.shape[-1]], mean, rstd, w, b, [True, True, b is not None])
        return dx, dw, db, None


def stacked_gate_up(self: SwiGLU, x: torch.Tensor) -> torch.Tensor:
    gate, up = F.linear(x, torch.cat([self.gate_proj.weight, self.up_proj.weight])).chunk(2, -1)
    return self.down_proj(F.silu(gate) * up)


def rms_with(fn: type[torch.autograd.Function]) -> Callable[[RMSNorm, torch.Tensor], torch.Tensor]:
    return lambda self, x: fn.apply(x, self.weight, self.eps)


def ln_in_function(self: LayerNorm, x: torch.Tensor) -> torch.Tensor:
    return _LayerNormInFunction.apply(x, self.weight, self.bias, self.eps)


# name -> (model fields changed, the module class replaced, its new forward)
PARTS = {
    "stacked gate|up": ({}, SwiGLU, stacked_gate_up),
    "rmsnorm passes": ({}, RMSNorm, rms_with(_RMSNormPasses)),
    "rmsnorm vector norm": ({}, RMSNorm, rms_with(_RMSNormVectorNorm)),
    "layernorm": ({"norm": "layernorm"}, None, None),
    "layernorm in Function": ({"norm": "layernorm"}, LayerNorm, ln_in_function),
}


def course_with(shape: tuple[int, ...], changes: dict, kind: type | None,
                forward: Callable | None) -> Transformer:
    model, _ = depthlab_model("course", *shape)
    torch.manual_seed(0)
    model = Transformer(dataclasses.replace(model.cfg, **changes)).train()
    for m in model.modules():
        if kind is not None and type(m) is kind:
            m.forward = types.MethodType(forward, m)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=3)
    add_shape_args(ap)
    args = ap.parse_args()
    if args.rounds < 2 or args.warmup < 0:
        ap.error("--rounds must be at least 2 (the quartiles need two) and --warmup at least 0")
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    data = np.random.default_rng(0).integers(0, VOCAB, 200_000).astype(np.int64)
    shape = shape_of(args)
    loops = {"course": depthlab_step("course", *shape, data),
             "gpt2 preset": depthlab_step("gpt2", *shape, data)}
    for name, part in PARTS.items():
        loops[name] = depthlab_step("course", *shape, data, model=course_with(shape, *part))
    for _ in range(args.warmup):
        for step in loops.values():
            step()
    names = list(loops)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = time.thread_time()
            loops[name]()
            times[name].append(time.thread_time() - t0)
    print(f"{args.rounds} rounds, {torch.get_num_threads()} thread(s); step / the course "
          "step of the same round: median (quartiles)")
    for name in names:
        ratios = [a / c for a, c in zip(times[name], times["course"], strict=True)]
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        print(f"{name:<22} {1000 * statistics.median(times[name]):7.1f} ms  "
              f"{statistics.median(ratios):.3f} ({q1:.3f}-{q3:.3f})")


if __name__ == "__main__":
    main()
