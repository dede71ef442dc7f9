"""Interleaved micro-benchmarks: candidates timed in rounds in one process on one thread,
in an order that rotates between rounds, so load on the machine hits every candidate
alike. Thread CPU time (time.thread_time) is reported beside wall time: on a busy
machine it counts only the time this thread ran. Used by norm-type and residual-frontier.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleave(steps: dict[str, Callable[[], None]], rounds: int,
               calls: int) -> dict[str, dict[str, float]]:
    """{name: {median_ms, min_ms, thread_median_ms}} per call over `rounds` rounds of
    `calls` calls each; every round runs every candidate, in an order that rotates."""
    import torch

    names = list(steps)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for step in steps.values():  # warm up
            step()
        wall: dict[str, list[float]] = {n: [] for n in names}
        cpu: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:
                t0, c0 = time.perf_counter(), time.thread_time()
                for _ in range(calls):
                    steps[n]()
                wall[n].append(1000 * (time.perf_counter() - t0) / calls)
                cpu[n].append(1000 * (time.thread_time() - c0) / calls)
    finally:
        torch.set_num_threads(threads)
    return {n: {"median_ms": statistics.median(wall[n]), "min_ms": min(wall[n]),
                "thread_median_ms": statistics.median(cpu[n])} for n in names}
