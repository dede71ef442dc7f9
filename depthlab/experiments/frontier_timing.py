"""Time per training step of each residual-frontier arm as a benchmark, not from the
runs (which share the machine with whatever else runs): each arm's model at the grid's
first depth, forward + backward on one fixed batch, interleaved in rounds in one process
on one thread, the order rotating between rounds, as depthlab.experiments.norm_timing
does for the norms. Thread CPU time is the figure; wall time beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from depthlab.config import Config
from depthlab.experiments.benchmark import interleave

BENCH_VOCAB = 65  # the character vocabulary of the course corpus


def _step(cfg: Config) -> Callable[[], None]:
    import torch
    import torch.nn.functional as F

    from depthlab.model import Transformer

    torch.manual_seed(0)
    model = Transformer(replace(cfg.model, vocab_size=BENCH_VOCAB))
    ids = torch.randint(0, BENCH_VOCAB, (cfg.train.batch_size, cfg.train.seq_len),
                        generator=torch.Generator().manual_seed(0))

    def step() -> None:
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(ids).flatten(0, 1), ids.flatten()).backward()

    return step


def time_arms(configs: dict[str, Config], rounds: int, calls: int) -> dict:
    """The benchmark of every arm in `configs` (arm -> its run config; all at one depth),
    with each arm's time relative to `plain` when plain is among them."""
    if not configs:
        return {}
    first = next(iter(configs.values()))
    times = interleave({n: _step(c) for n, c in configs.items()}, rounds, calls)
    ref = times.get("plain", {}).get("thread_median_ms")
    for t in times.values():
        t["vs_plain"] = t["thread_median_ms"] / ref if ref else float("nan")
    return {"depth": first.model.n_layers, "rounds": rounds, "calls": calls,
            "shape": f"{first.train.batch_size}x{first.train.seq_len}", "arms": times,
            "measured": "forward + backward, one thread, interleaved rounds, thread time median"}
