"""Time per training step of the widened residual streams against `plain`, at equal parameters.

The course model (4 layers, d_model 128, 65 characters) takes full AdamW steps (forward,
backward, update) on batches of 16 x 128 tokens, one thread, one process. The candidates
run one after another in every round, in an order that rotates between rounds, so load
on the machine hits them alike. hc and mhc add mixing parameters; to compare at equal
parameters their SwiGLU hidden size is shrunk until the total matches plain's (the
printed counts show how close). Prints the median and min wall time, the median thread
time (the time this thread ran: honest on a busy machine) and each candidate's ratio to
plain. The target for n = 4 streams is <= 1.3x. Never asserted.

The mixing is O(n D) memory-bound work per token and write, the sublayers O(D^2)
matmuls, so the overhead shrinks as the model widens: --d-model shows the trend.

    python bench/residual_frontier_speed.py [--rounds 7] [--calls 3] [--streams 4] [--d-model 128]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from depthlab.config import ModelConfig
from depthlab.model import Transformer
from depthlab.presets import course

VOCAB, BATCH, TOKENS = 65, 16, 128


def n_params(cfg: ModelConfig) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in Transformer(cfg).parameters())


def equal_params(cfg: ModelConfig, target: int) -> ModelConfig:
    """`cfg` with the SwiGLU hidden size whose parameter count is closest to `target`."""
    per_unit = n_params(replace(cfg, d_ff=cfg.ffn_hidden + 1)) - n_params(cfg)
    d_ff = cfg.ffn_hidden - round((n_params(cfg) - target) / per_unit)
    return replace(cfg, d_ff=d_ff)


def candidates(streams: int, d_model: int) -> dict[str, ModelConfig]:
    plain = replace(course().model, vocab_size=VOCAB, d_model=d_model)
    target = n_params(plain)
    wide = {"plain": plain,
            f"hc n={streams}": replace(plain, residual="hc", streams=streams),
            f"mhc n={streams}": replace(plain, residual="mhc", streams=streams),
            "attnres": replace(plain, residual="attnres")}
    return {name: cfg if name == "plain" else equal_params(cfg, target)
            for name, cfg in wide.items()}


def make_step(cfg: ModelConfig):
    torch.manual_seed(0)
    model = Transformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, VOCAB, (BATCH, TOKENS + 1), generator=torch.Generator().manual_seed(0))
    x, y = ids[:, :-1], ids[:, 1:]

    def step() -> None:
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    args = p.parse_args()
    torch.set_num_threads(1)
    cfgs = candidates(args.streams, args.d_model)
    steps = {name: make_step(cfg) for name, cfg in cfgs.items()}
    for step in steps.values():  # warm up
        step()
    names = list(steps)
    wall: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}
    for r in range(args.rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(args.calls):
                steps[k]()
            wall[k].append(1000 * (time.perf_counter() - t0) / args.calls)
            cpu[k].append(1000 * (time.thread_time() - c0) / args.calls)
    print(f"course model (d_model {args.d_model}), AdamW step on {BATCH} x {TOKENS} tokens, one thread; "
          f"{args.rounds} rounds x {args.calls} steps, interleaved")
    print(f"{'':<10} {'params':>10} {'d_ff':>5} {'wall median':>12} {'wall min':>10} "
          f"{'thread median':>14} {'vs plain (thread)':>18} {'vs plain (wall min)':>20}")
    base_cpu, base_min = statistics.median(cpu["plain"]), min(wall["plain"])
    for k in names:
        med_cpu = statistics.median(cpu[k])
        print(f"{k:<10} {n_params(cfgs[k]):>10,} {cfgs[k].ffn_hidden:>5} "
              f"{statistics.median(wall[k]):>9.1f} ms {min(wall[k]):>7.1f} ms "
              f"{med_cpu:>11.1f} ms {med_cpu / base_cpu:>17.2f}x {min(wall[k]) / base_min:>19.2f}x")


if __name__ == "__main__":
    main()
