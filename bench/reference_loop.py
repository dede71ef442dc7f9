"""depthlab's training step against a minimal reference loop, side by side in one process.

The reference is the tightest GPT-2-style loop we can write by hand (nanoGPT's shape):
one fused QKV nn.Linear, F.scaled_dot_product_attention, F.layer_norm, tanh GELU,
learned positions, tied head, fused AdamW, clip_grad_norm_. depthlab's step is what
`depthlab train` runs per step (its batches, loss, clipping, AdamW from make_optimizer),
with the gpt2 preset (the same architecture and FLOPs) and the course preset.

Shape: the char-level Shakespeare CPU recipe (4 layers, d 128, 4 heads, context 64,
batch 12, vocab 65, one thread). Steps alternate round-robin (ref, gpt2, course, ref, ...)
and each is timed with time.thread_time (on-CPU time of this thread), so other load on
the machine slows all of them alike instead of skewing the ratio. Prints the median
step of each and speed ratios (> 1.0x: depthlab is faster).

    python bench/reference_loop.py [--steps 60] [--threads 1] [--d-model 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from depthlab.model import Transformer
from depthlab.presets import get_preset
from depthlab.train import batches
from depthlab.train.loop import _loss
from depthlab.train.optim import lr_at, make_optimizer

VOCAB = 65  # tiny-shakespeare's characters


class RefBlock(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        h = F.layer_norm(x, (D,), self.ln1.weight, self.ln1.bias)
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        h = F.layer_norm(x, (D,), self.ln2.weight, self.ln2.bias)
        return x + self.fc_proj(F.gelu(self.fc(h), approximate="tanh"))


class RefGPT(nn.Module):
    def __init__(self, vocab: int, ctx: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(RefBlock(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        x = F.layer_norm(x, (x.shape[-1],), self.ln_f.weight, self.ln_f.bias)
        return x @ self.wte.weight.T


def reference_step(d: int, layers: int, heads: int, ctx: int, batch: int, data: np.ndarray):
    torch.manual_seed(0)
    model = RefGPT(VOCAB, ctx, d, layers, heads)
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


def depthlab_step(preset: str, d: int, layers: int, heads: int, ctx: int, batch: int,
                  data: np.ndarray):
    cfg = get_preset(preset)
    cfg = replace(cfg, model=replace(cfg.model, vocab_size=VOCAB, context_len=ctx, d_model=d,
                                     n_layers=layers, n_heads=heads),
                  train=replace(cfg.train, batch_size=batch, seq_len=ctx, steps=10**6))
    tc = cfg.train
    torch.manual_seed(tc.seed)
    model = Transformer(cfg.model)
    model.train()
    opt = make_optimizer(model, tc)
    state = {"i": 0}

    def step() -> None:  # the per-step body of depthlab.train.loop, on one rank
        i = state["i"]
        state["i"] += 1
        for group in opt.param_groups:
            group["lr"] = lr_at(i, tc)
        x, y = batches.train_batch(data, tc.seed, i, 0, batch, ctx, 0, 1, torch.device("cpu"))
        loss = _loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60, help="timed steps of each loop")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=12)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = np.random.default_rng(0).integers(0, VOCAB, 200_000).astype(np.int64)
    shape = (args.d_model, args.layers, args.heads, args.context, args.batch)
    loops = {"reference": reference_step(*shape, data),
             "depthlab gpt2": depthlab_step("gpt2", *shape, data),
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
    print(f"{'loop':<18} {'median ms/step':>15} {'tokens/CPU-s':>13} {'speed vs reference':>19}")
    ref = statistics.median(times["reference"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<18} {1000 * med:>15.1f} {tokens / med:>13,.0f} {ref / med:>18.2f}x")


if __name__ == "__main__":
    main()
