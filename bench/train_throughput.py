"""Training throughput of the course model: tokens/s and achieved FLOP/s as a fraction
of this machine's fp32 matmul peak, measured in the same run.

FLOPs per token = 6N (N = non-embedding parameters + the LM head matmul) plus
attention, 12 * L * T * d per token (forward + backward of QK^T and PV, causal
masking not subtracted). Peak = the rate of a large square torch.mm, timed right after
every training step, interleaved with the steps (not once before them), so the peak and
the steps see the same seconds of load; each measurement divides the median step's
FLOP/s by the median matmul rate of those same rounds. Times are CPU time of this
thread (time.thread_time), so other load on the machine counts against neither side
directly; it still moves both (shared caches, memory bandwidth), so each row is
measured `--repeats` times and the median, lowest and highest fraction printed.
`--compile` adds torch.compile'd rows (minutes of compilation on a CPU).
bench/step_cost.py does the same at the char-level recipe's shape, beside the gpt2
preset's step.

    python bench/train_throughput.py [--threads 1] [--steps 10] [--batch 16] [--seq 128]
                                     [--repeats 3] [--compile]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from depthlab.model import Transformer
from depthlab.presets import course
from depthlab.train.optim import make_optimizer
from depthlab.train.runtime import keep_freed_memory


def matmul_rate(a: torch.Tensor, b: torch.Tensor) -> float:
    """FLOP per CPU-second of one a @ b (square, n^3 multiply-adds)."""
    t0 = time.thread_time()
    torch.mm(a, b)
    return 2 * a.shape[0] ** 3 / (time.thread_time() - t0)


def flops_per_token(model: Transformer, seq: int) -> float:
    cfg = model.cfg
    n = sum(p.numel() for name, p in model.named_parameters() if not name.startswith(
        ("embed_tokens", "pos_embed")))
    n += cfg.vocab_size * cfg.d_model if cfg.tie_embeddings else 0  # the tied LM head matmul
    return 6 * n + 12 * cfg.n_layers * seq * cfg.n_heads * cfg.head_size


def measure(d_model: int, compiled: bool, steps: int, batch: int, seq: int,
            peak_n: int) -> tuple[float, float, float]:
    """tokens per CPU-second (median step), FLOPs per token, and the median matmul peak
    of the same rounds: each step is followed by one peak_n^3 torch.mm."""
    cfg = course()
    cfg = replace(cfg, model=replace(cfg.model, d_model=d_model, vocab_size=2048))
    torch.manual_seed(0)
    model = Transformer(cfg.model)
    opt = make_optimizer(model, cfg.train)
    fwd = torch.compile(model) if compiled else model
    x = torch.randint(0, cfg.model.vocab_size, (batch, seq + 1))
    a, b = torch.randn(peak_n, peak_n), torch.randn(peak_n, peak_n)

    def step() -> None:
        loss = F.cross_entropy(fwd(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):  # warm-up (and compilation)
        step()
        matmul_rate(a, b)
    times, peaks = [], []
    for _ in range(steps):
        t0 = time.thread_time()
        step()
        times.append(time.thread_time() - t0)
        peaks.append(matmul_rate(a, b))
    tokens_per_s = batch * seq / statistics.median(times)
    return tokens_per_s, flops_per_token(model, seq), statistics.median(peaks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3, help="measurements of each row")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile'd models")
    ap.add_argument("--peak-n", type=int, default=2048, help="size of the peak's square mm")
    args = ap.parse_args()
    keep_freed_memory()  # as depthlab train sets malloc on CPU
    torch.set_num_threads(args.threads)
    loads = [os.getloadavg()[0]]
    rows: dict[tuple[int, str], list[tuple[float, float, float]]] = {}
    for _ in range(args.repeats):
        for d in (128, 256):
            for compiled in (False, True) if args.compile else (False,):
                mode = "compiled" if compiled else "eager"
                try:
                    tps, fpt, peak = measure(d, compiled, args.steps, args.batch, args.seq,
                                             args.peak_n)
                except Exception as e:  # torch.compile needs a working C++ toolchain
                    print(f"{d:>7} {mode:>8}  skipped: torch.compile failed "
                          f"({type(e).__name__}: {str(e).splitlines()[0][:80]})")
                    continue
                rows.setdefault((d, mode), []).append((tps, tps * fpt, peak))
        loads.append(os.getloadavg()[0])
    peaks = [p for runs in rows.values() for _, _, p in runs]
    print(f"{datetime.date.today()}; threads {args.threads}; 1-min load average "
          f"{min(loads):.1f}-{max(loads):.1f}; fp32 matmul peak {min(peaks) / 1e9:.1f}-"
          f"{max(peaks) / 1e9:.1f} GFLOP/s per CPU-second ({args.peak_n}^3 torch.mm after every "
          f"step, median per measurement)")
    print(f"{'d_model':>7} {'mode':>8} {'tokens/CPU-s':>13} {'GFLOP/s':>8} {'of peak':>8} "
          f"{'lowest':>7} {'highest':>7}  ({args.repeats} measurements, median)")
    for (d, mode), runs in rows.items():
        fractions = [achieved / peak for _, achieved, peak in runs]
        print(f"{d:>7} {mode:>8} {statistics.median(r[0] for r in runs):>13,.0f} "
              f"{statistics.median(r[1] for r in runs) / 1e9:>8.1f} "
              f"{statistics.median(fractions):>8.1%} {min(fractions):>7.1%} {max(fractions):>7.1%}")


if __name__ == "__main__":
    main()
