"""Time per step of each norm as a benchmark, not from training runs: the three norms
alone, and a one-block course model with each, forward + backward, interleaved in
rounds in one process on one thread (depthlab.experiments.benchmark.interleave).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from depthlab.experiments.benchmark import interleave
from depthlab.presets import course

NORMS = ("layernorm", "rmsnorm", "rmsnorm_zero_centered")
SHAPE = (16, 64, 128)  # batch x tokens x d_model of a course-model training step


def _norm_step(kind: str, shape: tuple[int, int, int]) -> Callable[[], None]:
    import torch

    from depthlab.model.norms import make_norm

    norm = make_norm(kind, shape[-1], 1e-5)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0), requires_grad=True)

    def step() -> None:
        norm(x).square().mean().backward()

    return step


def _block_step(kind: str, shape: tuple[int, int, int]) -> Callable[[], None]:
    import torch
    import torch.nn.functional as F

    from depthlab.model import Transformer

    B, T, d = shape
    cfg = replace(course().model, n_layers=1, norm=kind, d_model=d, vocab_size=65)
    torch.manual_seed(0)
    model = Transformer(cfg)
    ids = torch.randint(0, 65, (B, T), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        F.cross_entropy(model(ids).flatten(0, 1), ids.flatten()).backward()

    return step


def time_norms(rounds: int = 15, calls: int = 20,
               shape: tuple[int, int, int] = SHAPE) -> dict[str, dict[str, dict[str, float]]]:
    """{"norm" | "block": {kind: {median_ms, min_ms, thread_median_ms}}}: milliseconds per
    forward + backward call, over `rounds` rounds of `calls` calls each; in every round
    the candidates run one after another, in an order that rotates between rounds."""
    return {what: interleave({k: make(k, shape) for k in NORMS}, rounds, calls)
            for what, make in (("norm", _norm_step), ("block", _block_step))}


def timing_rows(timing: dict) -> list[list[str]]:
    """Table rows: per norm, ms per norm call and per one-block step (thread time, median
    over rounds; the fastest wall time beside it), with the speed relative to LayerNorm."""
    rows = []
    for k in NORMS:
        cells = []
        for what in ("norm", "block"):
            t, ln = timing[what][k], timing[what]["layernorm"]
            cells.append(f"{t['thread_median_ms']:.3f} (wall min {t['min_ms']:.3f}); "
                         f"{ln['thread_median_ms'] / t['thread_median_ms']:.2f}x LayerNorm's speed")
        rows.append([k, *cells])
    return rows
