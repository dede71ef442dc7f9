"""Which tokens each step sees: a pure function of (seed, step, micro-step).

No sampler state lives in the process, so a resumed run, or a run on several
ranks, reads exactly the batches of an uninterrupted single-process run. Each
rank takes its contiguous part of every global batch and reads only its windows,
by offset: `ids` is the token cache's memmap or a depthlab.shards.TokenStream over
token shards, both sliced without reading the rest.
"""

from __future__ import annotations

import numpy as np
import torch


def batch_offsets(seed: int, step: int, micro: int, batch_size: int, n_tokens: int,
                  seq_len: int) -> np.ndarray:
    """Start positions of the `batch_size` windows of global micro-batch (step, micro)."""
    rng = np.random.Generator(np.random.PCG64([seed, step, micro]))
    return rng.integers(0, n_tokens - seq_len, size=batch_size)  # window + 1 target fits


def windows(ids: np.ndarray, offsets: np.ndarray, seq_len: int,
            device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets [B, T] for windows starting at `offsets`."""
    block = np.stack([np.asarray(ids[o:o + seq_len + 1], dtype=np.int64) for o in offsets])
    t = torch.from_numpy(block)
    return t[:, :-1].to(device), t[:, 1:].to(device)


def train_batch(ids: np.ndarray, seed: int, step: int, micro: int, batch_size: int,
                seq_len: int, rank: int, world: int,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    offsets = batch_offsets(seed, step, micro, batch_size, len(ids), seq_len)
    per_rank = batch_size // world
    return windows(ids, offsets[rank * per_rank:(rank + 1) * per_rank], seq_len, device)


def eval_offsets(n_tokens: int, seq_len: int, eval_tokens: int) -> tuple[np.ndarray, int]:
    """Fixed, non-overlapping validation windows spread evenly over the whole val split:
    (offsets, window length). Reading only the start of the split biases the loss toward
    that stretch of text; evenly spaced windows sample all of it. When eval_tokens covers
    the split, the windows tile it. A val split shorter than seq_len + 1 gives one
    shorter window."""
    length = min(seq_len, n_tokens - 1)
    fit = (n_tokens - 1) // length  # windows (plus their next-token target) that fit
    count = max(1, min(eval_tokens // length, fit))
    slots = np.linspace(0, fit - 1, count).round().astype(np.int64)  # distinct: count <= fit
    return slots * length, length


def fixed_batch(ids: np.ndarray, batch_size: int, seq_len: int,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` validation windows spread over the split: the fixed batch probes
    measure on, so a run's probe lines and an init-time measurement see the same tokens."""
    offsets, length = eval_offsets(len(ids), seq_len, batch_size * seq_len)
    return windows(ids, offsets[:batch_size], length, device)
