"""Tolerances from a number's own conditioning, for the simulator's float64 results.

Another CPU (other SIMD kernels, another BLAS, another thread count) rounds in another
order; how far that moves a result depends on the result: a naive depth-64, g = 2 stack is
chaotic and amplifies rounding ~1e10-fold, a scaled one not at all. `sensitivity` measures
each number's relative condition number by nudging (the backward-error model of rounding:
every operation's result off by a relative eps, here by NUDGE), and `tolerance` turns it
into a relative tolerance. Measured under ATen's default, avx2 and avx512 kernels, MKL held
to AVX2 or SSE4.2, 1 and 2 threads, over every number tests/test_simulator_wiring.py pins:
the spread is at most 2.9 eps x kappa where kappa >= 1 (the depth-64, g = 2 naive ratio:
kappa 3e10, spread 1.8e-6 = 0.26 eps x kappa; an AVX-512 Xeon with MKL gave 1.4e-6, 0.2),
and at most 1 ulp where kappa < 1 (the last reduction's own rounding).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from depthlab.probes import simulator

EPS = torch.finfo(torch.float64).eps
NUDGE = 1e-13  # far above rounding, small enough that even the chaotic stack stays linear
SAFETY, FLOOR = 32, 4  # tolerance = SAFETY x eps x (kappa + FLOOR): 10x the worst spread


def _clear_caches() -> None:
    for probe in (simulator.gradient_reach, simulator.token_collapse, simulator.gain_sweep):
        probe.cache_clear()


def nudged(monkeypatch, compute: Callable[[], Sequence[float]], draw: int) -> Sequence[float]:
    """`compute()` with the simulator's weights, input and the result of every write
    multiplied by 1 + NUDGE x uniform(-1, 1) (a fixed draw); caches cleared around it."""
    gen = torch.Generator().manual_seed(draw)

    def nudge(f):
        def call(*args, **kwargs):
            t = f(*args, **kwargs)
            return t * (1 + NUDGE * (2 * torch.rand(t.shape, generator=gen, dtype=t.dtype) - 1))
        return call

    with monkeypatch.context() as m:
        m.setattr(simulator, "_unit_weights", nudge(simulator._unit_weights))
        m.setattr(simulator, "_inputs", nudge(simulator._inputs))
        m.setattr(simulator.Wiring, "write", nudge(simulator.Wiring.write))
        _clear_caches()
        try:
            return compute()
        finally:
            _clear_caches()


def sensitivity(monkeypatch, compute: Callable[[], Sequence[float]], draws: int = 2) -> list[float]:
    """Each number's relative condition number: how far it moves, relative to itself and
    per unit of relative nudge; the largest over `draws` nudges."""
    base = compute()
    moved = [nudged(monkeypatch, compute, draw) for draw in range(draws)]
    return [max(abs(m[i] - a) / abs(a) / NUDGE for m in moved) for i, a in enumerate(base)]


def tolerance(kappa: float) -> float:
    """The relative tolerance of a number with condition number `kappa`."""
    return SAFETY * EPS * (kappa + FLOOR)
