"""Muon's step on CPU with its Newton-Schulz iterations in bfloat16 (torch.optim.Muon's
choice) against float32 (depthlab's on CPU), and both against the forward and backward
pass they follow, side by side in one process.

The model and batch are `--preset speedrun`'s (the course model with Muon, 16 x 64
characters a step, vocab 65), one thread. Every round runs one forward and backward pass
and then each optimizer's step on a copy of the same gradients, in alternating order,
each timed with time.thread_time. The printed ratios are medians over rounds of ratios
taken within a round. Which dtype is faster depends on the CPU: one with bfloat16
instructions (avx512_bf16, amx_bf16, as torch.cpu.get_capabilities() reports them) may
multiply bfloat16 as fast as float32 or faster; one without (AVX2) emulates it.

    python bench/muon_step.py [--rounds 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import time
from dataclasses import replace

import torch

from depthlab.model import Transformer
from depthlab.presets import get_preset
from depthlab.train.optim import make_optimizer
from depthlab.train.runtime import cpu_bfloat16_instructions, keep_freed_memory

VOCAB = 65


def timed(fn) -> float:
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def forward_backward(model: Transformer, x: torch.Tensor, y: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.rounds < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--rounds and --threads must be at least 1, --warmup at least 0")
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    cfg = get_preset("speedrun")
    cfg = replace(cfg, model=replace(cfg.model, vocab_size=VOCAB))
    torch.manual_seed(0)
    model = Transformer(cfg.model)
    model.train()
    ours = make_optimizer(model, cfg.train).muon  # float32 on CPU
    # torch's bfloat16 steps its own copy: the same optimizer with the iterations in
    # bfloat16 is torch.optim.Muon bit for bit (tests/test_optim.py)
    theirs = make_optimizer(copy.deepcopy(model), cfg.train).muon
    theirs.orthogonalise_in = torch.bfloat16
    gen = torch.Generator().manual_seed(0)
    times: dict[str, list[float]] = {"forward+backward": [], "float32": [], "bfloat16": []}
    load = os.getloadavg()[0]
    for i in range(args.warmup + args.rounds):
        x = torch.randint(0, VOCAB, (cfg.train.batch_size, cfg.train.seq_len), generator=gen)
        y = torch.randint(0, VOCAB, x.shape, generator=gen)

        t = {"forward+backward": timed(lambda x=x, y=y: forward_backward(model, x, y))}
        for p, q in zip((p for g in ours.param_groups for p in g["params"]),
                        (q for g in theirs.param_groups for q in g["params"]), strict=True):
            q.grad = p.grad.clone()
        order = ("float32", "bfloat16") if i % 2 == 0 else ("bfloat16", "float32")
        for name in order:
            t[name] = timed((ours if name == "float32" else theirs).step)
        if i >= args.warmup:
            for name, v in t.items():
                times[name].append(v)
    name = getattr(torch.cpu, "get_capabilities", dict)().get("cpu_name", platform.machine())
    print(f"{name}, capability "
          f"{torch.backends.cpu.get_cpu_capability()}, bfloat16 instructions: "
          f"{', '.join(cpu_bfloat16_instructions()) or 'none'}; torch {torch.__version__}, "
          f"{args.threads} thread(s), load average {load:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after; {args.rounds} rounds")
    n = sum(len(g["params"]) for g in ours.param_groups)
    for name, v in times.items():
        print(f"{name:17s} median {statistics.median(v) * 1e3:8.1f} ms"
              + ("" if name == "forward+backward" else f" ({n} matrices)"))
    ratio = statistics.median(a / b for a, b in zip(times["bfloat16"], times["float32"], strict=True))
    over = statistics.median(a / b for a, b in zip(times["float32"], times["forward+backward"], strict=True))
    print(f"Muon step, bfloat16 / float32: {ratio:.2f}x; float32 Muon step / forward+backward: "
          f"{over:.2f}x")


if __name__ == "__main__":
    main()
