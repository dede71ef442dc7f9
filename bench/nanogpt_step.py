"""depthlab's training step against nanoGPT's own, at nanoGPT's char-Shakespeare shape,
side by side in one process; and what the hook points cost when no hook is attached.

nanoGPT's step is its train.py loop body on CPU (float32, no autocast; its GradScaler
disables itself without CUDA): set the learning rate on every group, `model(X, Y)` (the
loss inside its forward), fetch the next batch (get_batch's torch.randint offsets and
torch.stack of int64 slices, from an in-memory uint16 array instead of np.memmap),
backward, clip_grad_norm_ at 1.0, `optimizer.step()` (configure_optimizers' AdamW:
device_type "cpu", so PyTorch's default for-loop kernel), zero_grad. Its model and
configure_optimizers are imported from DIR/model.py with --nanogpt DIR (a nanoGPT
checkout), else from bench/nanogpt_model.py, a re-statement of them op for op; bias=False
and dropout 0.0, as README's CPU command sets them. depthlab's steps are what `depthlab
train` runs per step (bench/reference_loop.depthlab_step), course and gpt2 presets.
"course, hooks compiled out" is the course step with every hook call removed from the
forwards' source (bench/hooks_out.py): its ratio to the course step is what the hook
points cost.

Every round runs each loop once, in alternating order, then one --peak-n^3 torch.mm,
each timed with time.thread_time (this thread's CPU time). Rounds form --blocks blocks;
per block, the median over its rounds of each paired ratio (a step / nanoGPT's step of
the same round) and each step's fraction of the block's median matmul rate (FLOPs:
6 x the non-embedding parameters plus the tied head, plus attention's 12 L T d, per
token). Printed: the median over blocks and the lowest and highest block.

    python bench/nanogpt_step.py [--nanogpt DIR] [--blocks 5] [--rounds 8] [--d-model 128]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from hooks_out import compile_out
from reference_loop import VOCAB, add_shape_args, depthlab_model, depthlab_step, shape_of
from train_throughput import flops_per_token

from depthlab.train.runtime import keep_freed_memory

# nanoGPT's config/train_shakespeare_char.py: AdamW's settings and the clip
LR, WEIGHT_DECAY, BETAS, GRAD_CLIP = 1e-3, 0.1, (0.9, 0.99), 1.0


def nanogpt_module(path: str | None) -> tuple[ModuleType, str]:
    """nanoGPT's model.py from a checkout, or bench's re-statement; and which it is."""
    if path is None:
        here = Path(__file__).with_name("nanogpt_model.py")
        where = "bench/nanogpt_model.py (nanoGPT's model.py re-stated)"
    else:
        here = Path(path) / "model.py"
        where = f"{here} (imported)"
        if not here.is_file():
            raise SystemExit(f"--nanogpt: {here} does not exist (give a nanoGPT checkout)")
    spec = importlib.util.spec_from_file_location("nanogpt_model_under_test", here)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module, where


def nanogpt_step(ng: ModuleType, d: int, layers: int, heads: int, ctx: int, batch: int,
                 data: np.ndarray) -> tuple[Callable[[], None], float]:
    """nanoGPT's train.py step on CPU (see the module docstring), and its FLOPs per token."""
    torch.manual_seed(1337)
    cfg = ng.GPTConfig(block_size=ctx, vocab_size=VOCAB, n_layer=layers, n_head=heads,
                       n_embd=d, dropout=0.0, bias=False)
    model = ng.GPT(cfg)
    opt = model.configure_optimizers(WEIGHT_DECAY, LR, BETAS, "cpu")
    train = data.astype(np.uint16)

    def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(train) - ctx, (batch,))
        x = torch.stack([torch.from_numpy((train[i:i + ctx]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((train[i + 1:i + 1 + ctx]).astype(np.int64)) for i in ix])
        return x, y

    state = {"xy": get_batch()}

    def step() -> None:
        for group in opt.param_groups:
            group["lr"] = LR
        _, loss = model(*state["xy"])
        state["xy"] = get_batch()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)

    n = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    return step, 6 * n + 12 * layers * ctx * d


def matmul_rate(a: torch.Tensor, b: torch.Tensor) -> float:
    t0 = time.thread_time()
    torch.mm(a, b)
    return 2 * a.shape[0] * a.shape[1] * b.shape[1] / (time.thread_time() - t0)


def spread(values: list[float], fmt: str) -> str:
    return (f"median {format(statistics.median(values), fmt)} (blocks "
            f"{format(min(values), fmt)} to {format(max(values), fmt)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nanogpt", metavar="DIR", help="a nanoGPT checkout whose model.py to import")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=8, help="rounds per block")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak-n", type=int, default=1024, help="size of the peak's square mm")
    add_shape_args(ap)
    args = ap.parse_args()
    if min(args.blocks, args.rounds) < 1 or args.warmup < 0:
        ap.error("--blocks and --rounds must be at least 1, --warmup at least 0")
    keep_freed_memory()  # as depthlab train sets malloc on CPU; it applies to every loop
    torch.set_num_threads(args.threads)
    ng, where = nanogpt_module(args.nanogpt)
    data = np.random.default_rng(0).integers(0, VOCAB, 200_000).astype(np.int64)
    shape = shape_of(args)
    tokens = args.batch * args.context
    nano, nano_flops = nanogpt_step(ng, *shape, data)
    loops: dict[str, Callable[[], None]] = {"nanoGPT": nano}
    flops = {"nanoGPT": tokens * nano_flops}
    for preset in ("course", "gpt2"):
        model = depthlab_model(preset, *shape)[0]
        loops[preset] = depthlab_step(preset, *shape, data, model=model)
        flops[preset] = tokens * flops_per_token(model, args.context)
    out = compile_out(depthlab_model("course", *shape)[0])
    loops["course, hooks compiled out"] = depthlab_step("course", *shape, data, model=out)
    a, b = torch.randn(args.peak_n, args.peak_n), torch.randn(args.peak_n, args.peak_n)
    for _ in range(args.warmup):
        for step in loops.values():
            step()
        matmul_rate(a, b)
    names = list(loops)
    times: dict[str, list[list[float]]] = {name: [] for name in names}
    peaks: list[list[float]] = []
    loads = [os.getloadavg()[0]]
    for block in range(args.blocks):
        for ts in times.values():
            ts.append([])
        peaks.append([])
        for r in range(args.rounds):
            for name in names if (block * args.rounds + r) % 2 == 0 else names[::-1]:
                t0 = time.thread_time()
                loops[name]()
                times[name][-1].append(time.thread_time() - t0)
            peaks[-1].append(matmul_rate(a, b))
        loads.append(os.getloadavg()[0])

    def ratio(x: str, y: str) -> list[float]:
        return [statistics.median(p / q for p, q in zip(bx, by, strict=True))
                for bx, by in zip(times[x], times[y], strict=True)]

    peak = [statistics.median(p) for p in peaks]
    print(f"{datetime.date.today()}; {platform.machine()}, {os.cpu_count()} CPUs, 1-min load "
          f"average {min(loads):.1f}-{max(loads):.1f}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s); shape {args.layers} layers, d {args.d_model}, "
          f"{args.heads} heads, context {args.context}, batch {args.batch}, vocab {VOCAB}")
    print(f"nanoGPT: {where}; {args.blocks} blocks of {args.rounds} interleaved rounds, "
          "thread CPU time")
    print(f"fp32 matmul peak ({args.peak_n}^3 torch.mm): {spread([p / 1e9 for p in peak], '.1f')}"
          " GFLOP/s")
    for name in names:
        ms = [1000 * statistics.median(t) for t in times[name]]
        line = f"{name:<27} step {spread(ms, '.1f')} ms"
        if name in flops:
            frac = [100 * flops[name] / (m / 1000) / p for m, p in zip(ms, peak, strict=True)]
            line += f"; of peak {spread(frac, '.1f')} %"
        print(line)
    for name in ("course", "gpt2"):
        print(f"{name} step / nanoGPT step: {spread(ratio(name, 'nanoGPT'), '.3f')} "
              "(goal: at most 0.95)")
    print("course step / course step with hooks compiled out: "
          f"{spread(ratio('course', 'course, hooks compiled out'), '.3f')} (1.0: hooks cost nothing)")


if __name__ == "__main__":
    main()
