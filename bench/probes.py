"""How fast the probes answer a slider: median of several runs beside each target.

Run: python bench/probes.py. Caches of results are cleared before every run, so each
figure is a full computation (a model built for a shape stays built, as in the server).
Times are on-CPU time of this thread (time.thread_time), so other load on the machine
does not inflate them; the wall-clock median is printed beside it. Targets: simulator
gradient probe at N = 32 <= 20 ms; a 31-point g sweep of both rows <= 1 s; a real-block
probe (d 64, 32 tokens, 32 sublayers) <= 60 ms.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import torch

from depthlab.presets import get_preset
from depthlab.probes import (
    RealRequest,
    StackRequest,
    gain_sweep,
    gradient_reach,
    real_probe,
    token_collapse,
    use_single_thread,
)


def median_ms(fn: Callable[[], object], clear: Callable[[], None],
              runs: int = 7) -> tuple[float, float]:
    """Median on-CPU and wall milliseconds of `fn` over `runs` runs after a warm-up."""
    cpu, wall = [], []
    for _ in range(runs + 1):  # the first run warms up and is dropped
        clear()
        c0, w0 = time.thread_time(), time.perf_counter()
        fn()
        cpu.append(1000 * (time.thread_time() - c0))
        wall.append(1000 * (time.perf_counter() - w0))
    return statistics.median(cpu[1:]), statistics.median(wall[1:])


def main() -> None:
    use_single_thread()
    improved = StackRequest(depth=32, residual="scaled", norm="rmsnorm")
    small = replace(get_preset("course").model, d_model=64, n_heads=4)
    cases = [
        ("simulator gradient probe, N = 32", 20,
         lambda: gradient_reach(improved), gradient_reach.cache_clear),
        ("simulator collapse probe, N = 32", 20,
         lambda: token_collapse(improved), token_collapse.cache_clear),
        ("31-point g sweep, naive + improved rows", 1000,
         lambda: gain_sweep(improved), gain_sweep.cache_clear),
        ("real-block probe, d 64, 32 tokens, 16 blocks = 32 sublayers", 60,
         lambda: real_probe(RealRequest(replace(small, n_layers=16), tokens=32)),
         real_probe.cache_clear),
        ("real-block probe, d 64, 32 tokens, 32 blocks = 64 sublayers", None,
         lambda: real_probe(RealRequest(replace(small, n_layers=32), tokens=32)),
         real_probe.cache_clear),
    ]
    print(f"torch threads {torch.get_num_threads()}, machine CPUs {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'probe':<62} {'CPU ms':>8} {'wall ms':>8} {'target':>8}")
    for label, target, fn, clear in cases:
        ms, wall = median_ms(fn, clear)
        goal = f"<= {target}" if target else "-"
        flag = "" if target is None or ms <= target else "  (over)"
        print(f"{label:<62} {ms:>8.1f} {wall:>8.1f} {goal:>8}{flag}")


if __name__ == "__main__":
    main()
