"""The course preset's training step against the gpt2 preset's, and as a fraction of the
fp32 matmul peak, all measured side by side in one process.

Both steps are what `depthlab train` runs per step (bench/reference_loop.py builds
them: batches, loss, clipping, AdamW), at the char-level Shakespeare CPU recipe's shape
(4 layers, d 128, 4 heads, context 64, batch 12, vocab 65, one thread). Every round runs
one step of each preset, in alternating order, and one --peak-n^3 `torch.mm` (the peak),
each timed with time.thread_time (on-CPU time of this thread), so load from other work
falls on all of them in the same seconds. Rounds are grouped in --blocks blocks of
--rounds; each block gives one step-time ratio (the median over its rounds of course
step / gpt2 step, the two timed next to each other) and one fraction of peak (the
course step's FLOPs over its median time, divided by the median matmul rate of the same
block). Printed: the median over blocks and the lowest and highest block, and the page
faults a step takes (malloc is set as `depthlab train` sets it on CPU,
depthlab.train.runtime.keep_freed_memory; --malloc-defaults leaves glibc's defaults).
FLOPs per token are bench/train_throughput.py's (6N + attention).

--without rope|rmsnorm adds a third loop, the course step with that fused path of
depthlab.model.fused turned off (its readable layers instead): an interleaved A/B of the
whole step. --set model.FIELD=VALUE (repeatable) adds the course step with that one
field changed (model.norm=layernorm, model.position=learned, model.ffn=gelu: which
of the course block's parts costs what against the gpt2 preset's).

    python bench/step_cost.py [--blocks 6] [--rounds 10] [--without rope]
                              [--set model.norm=layernorm ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import resource
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from reference_loop import VOCAB, add_shape_args, depthlab_model, depthlab_step, shape_of
from train_throughput import flops_per_token

from depthlab.model import Transformer
from depthlab.model.attention import Attention
from depthlab.model.norms import RMSNorm
from depthlab.train.runtime import keep_freed_memory

# Each fused path's per-module switch: the attribute that says why it falls back.
SWITCHES = {"rope": (Attention, "rotary_fallback"), "rmsnorm": (RMSNorm, "fused_fallback")}


def turn_off(model: Transformer, path: str) -> Transformer:
    kind, attr = SWITCHES[path]
    modules = [m for m in model.modules() if isinstance(m, kind)]
    if not modules or not all(hasattr(m, attr) for m in modules):
        raise SystemExit(f"--without {path}: no {kind.__name__} with {attr} in the course model")
    for m in modules:
        setattr(m, attr, "turned off by bench/step_cost.py --without")
    return model


def changed(preset: str, shape: tuple[int, ...], override: str) -> Transformer:
    """The preset's model at this shape with one model field set, e.g. model.norm=layernorm."""
    key, _, raw = override.partition("=")
    field = key.removeprefix("model.")
    model, _ = depthlab_model(preset, *shape)
    if not raw or field not in {f.name for f in dataclasses.fields(model.cfg)}:
        raise SystemExit(f"--set {override}: expected model.FIELD=VALUE with a ModelConfig field")
    value = json.loads(raw) if raw in ("true", "false", "null") or raw[0].isdigit() else raw
    torch.manual_seed(0)
    return Transformer(dataclasses.replace(model.cfg, **{field: value})).train()


def matmul_rate(a: torch.Tensor, b: torch.Tensor) -> float:
    """FLOP per CPU-second of one a @ b."""
    t0 = time.thread_time()
    torch.mm(a, b)
    return 2 * a.shape[0] * a.shape[1] * b.shape[1] / (time.thread_time() - t0)


RUSAGE = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)  # this thread, on Linux


def paired(a: list[float], b: list[float]) -> float:
    """The median of a / b over rounds: each pair timed next to each other."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def spread(values: list[float], fmt: str) -> str:
    return (f"median {format(statistics.median(values), fmt)}, blocks "
            f"{format(min(values), fmt)} to {format(max(values), fmt)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=10, help="rounds per block")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak-n", type=int, default=1024, help="size of the peak's square mm")
    ap.add_argument("--without", choices=sorted(SWITCHES), help="add the course step without it")
    ap.add_argument("--set", action="append", default=[], metavar="model.FIELD=VALUE",
                    help="add the course step with this model field changed")
    ap.add_argument("--malloc-defaults", action="store_true",
                    help="leave glibc's malloc settings as they are (depthlab train changes them)")
    add_shape_args(ap)
    args = ap.parse_args()
    if min(args.blocks, args.rounds) < 1 or args.warmup < 0:
        ap.error("--blocks and --rounds must be at least 1, --warmup at least 0")
    kept = False if args.malloc_defaults else keep_freed_memory()
    torch.set_num_threads(args.threads)
    data = np.random.default_rng(0).integers(0, VOCAB, 200_000).astype(np.int64)
    shape = shape_of(args)
    models = {"course": depthlab_model("course", *shape)[0], "gpt2": depthlab_model("gpt2", *shape)[0]}
    loops: dict[str, Callable[[], None]] = {
        name: depthlab_step(name, *shape, data, model=model) for name, model in models.items()}
    if args.without:
        name = f"course without {args.without}"
        loops[name] = depthlab_step("course", *shape, data, model=turn_off(
            depthlab_model("course", *shape)[0], args.without))
    for override in args.set:
        loops[f"course {override}"] = depthlab_step("course", *shape, data,
                                                    model=changed("course", shape, override))
    a, b = torch.randn(args.peak_n, args.peak_n), torch.randn(args.peak_n, args.peak_n)
    tokens = args.batch * args.context
    flops = {name: tokens * flops_per_token(model, args.context) for name, model in models.items()}

    for _ in range(args.warmup):
        for step in loops.values():
            step()
        matmul_rate(a, b)
    times: dict[str, list[list[float]]] = {name: [] for name in loops}
    faults: dict[str, list[int]] = {name: [] for name in loops}
    peaks: list[list[float]] = []
    loads = [os.getloadavg()[0]]
    names = list(loops)
    for block in range(args.blocks):
        for ts in times.values():
            ts.append([])
        peaks.append([])
        for r in range(args.rounds):
            order = names if (block * args.rounds + r) % 2 == 0 else names[::-1]
            for name in order:
                f0, t0 = resource.getrusage(RUSAGE).ru_minflt, time.thread_time()
                loops[name]()
                times[name][-1].append(time.thread_time() - t0)
                faults[name].append(resource.getrusage(RUSAGE).ru_minflt - f0)
            peaks[-1].append(matmul_rate(a, b))
        loads.append(os.getloadavg()[0])

    med = {name: [statistics.median(b) for b in blocks] for name, blocks in times.items()}
    peak = [statistics.median(p) for p in peaks]
    print(f"{datetime.date.today()}; shape: {args.layers} layers, d {args.d_model}, "
          f"{args.heads} heads, context {args.context}, batch {args.batch}, vocab {VOCAB}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); 1-min load average "
          f"{min(loads):.1f}-{max(loads):.1f}, {os.cpu_count()} CPUs; malloc: "
          f"{'keeps freed memory, as depthlab train sets it' if kept else 'glibc defaults'}")
    print(f"{args.blocks} blocks of {args.rounds} rounds; per block the median of each loop "
          f"and of the {args.peak_n}^3 torch.mm rate (thread CPU time)")
    print(f"fp32 matmul peak: {spread([p / 1e9 for p in peak], '.1f')} GFLOP/s")
    for name in loops:
        ms = [1000 * m for m in med[name]]
        line = (f"{name:<22} step {spread(ms, '.1f')} ms; "
                f"{statistics.median(faults[name]):.0f} page faults a step")
        if name in flops:
            frac = [flops[name] / m / p for m, p in zip(med[name], peak, strict=True)]
            line += f"; of peak {spread([100 * f for f in frac], '.1f')} %"
        print(line)
    for name in (n for n in loops if n != "gpt2"):
        ratios = [paired(c, g) for c, g in zip(times[name], times["gpt2"], strict=True)]
        print(f"{name} step / gpt2 step: {spread(ratios, '.3f')} (goal: at most 1.0)")
    if args.without:
        name = f"course without {args.without}"
        ab = [paired(c, w) for c, w in zip(times["course"], times[name], strict=True)]
        print(f"course / {name}: {spread(ab, '.3f')} (< 1: the fused path pays)")


if __name__ == "__main__":
    main()
