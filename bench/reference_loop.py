"""depthlab's training step against minimal reference loops, side by side in one process.

The reference is nanoGPT's model (depthlab.experiments.reference_gpt, the one the
speedrun experiment trains): one fused QKV nn.Linear, F.scaled_dot_product_attention,
LayerNorm, learned positions, tied head; here with biases and tanh GELU, as the gpt2
preset has them, and fused AdamW, clip_grad_norm_. depthlab's step is what
`depthlab train` runs per step (its batches, loss, clipping, AdamW from make_optimizer),
with the gpt2 preset (the same architecture and FLOPs). A second reference computes the
course model's block the same tight way (F.rms_norm, RoPE from a precomputed table, one
gate|up nn.Linear for SwiGLU) and races depthlab's course preset.

Shape: the char-level Shakespeare CPU recipe (4 layers, d 128, 4 heads, context 64,
batch 12, vocab 65, one thread). Steps alternate round-robin (each loop in turn)
and each is timed with time.thread_time (on-CPU time of this thread), so other load on
the machine slows all of them alike instead of skewing the ratio. Prints the median
step of each and speed ratios (> 1.0x: depthlab is faster), then the spread: the same
ratio in each of --blocks consecutive blocks of rounds, lowest to highest.

depthlab's step runs its CPU training fast paths as `depthlab train` does
(depthlab.model.fused: q|k|v split + RoPE in one function, RMSNorm's backward written
out, GELU's tanh form through a sigmoid); the references use PyTorch's own ops.

    python bench/reference_loop.py [--steps 60] [--blocks 6] [--threads 1] [--d-model 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from depthlab.config import TrainConfig
from depthlab.experiments.reference_gpt import RefGPT
from depthlab.model import Transformer
from depthlab.presets import get_preset
from depthlab.train import batches
from depthlab.train.optim import lr_at, make_optimizer
from depthlab.train.runtime import keep_freed_memory
from depthlab.train.step import lm_loss

VOCAB = 65  # tiny-shakespeare's characters


class RefCourseBlock(nn.Module):
    """Pre-RMSNorm, RoPE, SwiGLU: the course block, written as tightly as we can."""

    def __init__(self, d: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.gate_up = nn.Linear(d, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        h = F.rms_norm(x, (D,), self.n1, 1e-5)
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        q, k = (torch.cat([-t[..., t.shape[-1] // 2:], t[..., :t.shape[-1] // 2]], -1) * sin
                + t * cos for t in (q, k))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        gate, up = self.gate_up(F.rms_norm(x, (D,), self.n2, 1e-5)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class RefCourse(nn.Module):
    def __init__(self, vocab: int, ctx: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        hidden = 16 * -(-8 * d // 3 // 16)  # 8d/3 rounded up to 16, as the course model
        self.wte = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(RefCourseBlock(d, heads, hidden) for _ in range(layers))
        self.norm = nn.Parameter(torch.ones(d))
        e = d // heads
        angles = torch.outer(torch.arange(ctx).float(), 1e4 ** (-torch.arange(0, e, 2) / e))
        angles = torch.cat([angles, angles], -1)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)
        T = idx.shape[1]
        for block in self.blocks:
            x = block(x, self.cos[:T], self.sin[:T])
        return F.rms_norm(x, (x.shape[-1],), self.norm, 1e-5) @ self.wte.weight.T


def gpt2_shaped(vocab: int, ctx: int, d: int, layers: int, heads: int) -> RefGPT:
    """nanoGPT's model with the gpt2 preset's biases and tanh GELU (the same FLOPs)."""
    return RefGPT(vocab, ctx, d, layers, heads, bias=True, gelu="tanh")


def reference_step(arch: Callable[..., nn.Module], d: int, layers: int, heads: int, ctx: int,
                   batch: int, data: np.ndarray):
    torch.manual_seed(0)
    model = arch(VOCAB, ctx, d, layers, heads)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    state = {"i": 0}

    def step() -> None:
        i = state["i"]
        state["i"] += 1
        x, y = batches.train_batch(data, 0, i, 0, batch, ctx, 0, 1, torch.device("cpu"))
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def depthlab_model(preset: str, d: int, layers: int, heads: int, ctx: int,
                   batch: int) -> tuple[Transformer, TrainConfig]:
    """The preset's model at this shape, in training mode, and its training config."""
    cfg = get_preset(preset)
    cfg = replace(cfg, model=replace(cfg.model, vocab_size=VOCAB, context_len=ctx, d_model=d,
                                     n_layers=layers, n_heads=heads),
                  train=replace(cfg.train, batch_size=batch, seq_len=ctx, steps=10**6))
    torch.manual_seed(cfg.train.seed)
    model = Transformer(cfg.model)
    model.train()
    return model, cfg.train


def depthlab_step(preset: str, d: int, layers: int, heads: int, ctx: int, batch: int,
                  data: np.ndarray, model: Transformer | None = None):
    """One `depthlab train` step of the preset's model at this shape (or of `model`, one
    built by depthlab_model and then adjusted)."""
    built, tc = depthlab_model(preset, d, layers, heads, ctx, batch)
    model = built if model is None else model
    opt = make_optimizer(model, tc)
    state = {"i": 0}

    def step() -> None:  # the per-step body of depthlab.train.step, on one rank
        i = state["i"]
        state["i"] += 1
        for group in opt.param_groups:
            group["lr"] = lr_at(i, tc)
        x, y = batches.train_batch(data, tc.seed, i, 0, batch, ctx, 0, 1, torch.device("cpu"))
        loss = lm_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def add_shape_args(ap: argparse.ArgumentParser) -> None:
    """--threads and the model and batch shape, the char-level Shakespeare CPU recipe's
    by default (shared with bench/step_cost.py)."""
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=12)


def shape_of(args: argparse.Namespace) -> tuple[int, int, int, int, int]:
    return (args.d_model, args.layers, args.heads, args.context, args.batch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60, help="timed steps of each loop")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=6, help="blocks of rounds for the spread")
    add_shape_args(ap)
    args = ap.parse_args()
    keep_freed_memory()  # as depthlab train sets malloc on CPU
    torch.set_num_threads(args.threads)
    data = np.random.default_rng(0).integers(0, VOCAB, 200_000).astype(np.int64)
    shape = shape_of(args)
    loops = {"reference gpt2": reference_step(gpt2_shaped, *shape, data),
             "depthlab gpt2": depthlab_step("gpt2", *shape, data),
             "reference course": reference_step(RefCourse, *shape, data),
             "depthlab course": depthlab_step("course", *shape, data)}
    times: dict[str, list[float]] = {name: [] for name in loops}
    load_before = os.getloadavg()[0]
    wall = time.perf_counter()
    for i in range(args.warmup + args.steps):
        for name, step in loops.items():
            t0 = time.thread_time()
            step()
            if i >= args.warmup:
                times[name].append(time.thread_time() - t0)
    wall = time.perf_counter() - wall
    cpu = sum(sum(t) for t in times.values())
    tokens = args.batch * args.context
    print(f"shape: {args.layers} layers, d {args.d_model}, {args.heads} heads, context "
          f"{args.context}, batch {args.batch}, vocab {VOCAB}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s)")
    print(f"load: 1-min load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after, "
          f"{os.cpu_count()} CPUs; this thread was on CPU {cpu / wall:.0%} of the wall time")
    print(f"{'loop':<18} {'median ms/step':>15} {'tokens/CPU-s':>13} {'speed vs its reference':>23}")
    for name, ts in times.items():
        med = statistics.median(ts)
        ref = statistics.median(times["reference " + name.split()[-1]])
        print(f"{name:<18} {1000 * med:>15.1f} {tokens / med:>13,.0f} {ref / med:>22.2f}x")
    size = max(1, args.steps // args.blocks)
    for name in (n for n in times if n.startswith("depthlab")):
        ref_times = times["reference " + name.split()[-1]]
        ratios = sorted(statistics.median(ref_times[i:i + size]) / statistics.median(
            times[name][i:i + size]) for i in range(0, size * (args.steps // size), size))
        print(f"spread, {name} vs its reference in {len(ratios)} blocks of {size} rounds: "
              f"{ratios[0]:.2f}x to {ratios[-1]:.2f}x (median {statistics.median(ratios):.2f}x)")


if __name__ == "__main__":
    main()
