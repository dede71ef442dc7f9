"""One optimizer step: forward and backward over the micro-batches, the gradient clip,
then (only when the values that must be read are finite) the update.

The data a step reads is a function of (seed, step, micro, rank), so a resumed run
sees the batches it would have seen.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from depthlab.train import batches, parallel, runtime
from depthlab.train.optim import Optimizer, set_lr
from depthlab.train.setup import Run


@dataclass(frozen=True)
class StepResult:
    lr: float
    loss: torch.Tensor  # mean over micro-batches and ranks, on the device (not read yet)
    grad_norm: torch.Tensor  # before clipping, on the device


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy, computed in float32 whatever the autocast dtype."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def train_step(run: Run, step: int) -> StepResult:
    """Set the learning rate of `step`, accumulate gradients over train.grad_accum
    micro-batches (DDP syncs only on the last) and clip them; no update yet."""
    train_cfg, proc = run.cfg.train, run.proc
    lr = set_lr(run.optimizer, step, train_cfg)
    loss_sum = torch.zeros((), device=proc.device)
    for micro in range(train_cfg.grad_accum):
        x, y = (runtime.to_device(t, proc.device) for t in batches.train_batch(
            run.data.train, train_cfg.seed, step, micro, train_cfg.batch_size, train_cfg.seq_len, proc.rank,
            proc.world, torch.device("cpu")))
        last = micro == train_cfg.grad_accum - 1
        if run.sharded:  # fsdp reduce-scatters on the last micro-batch only
            parallel.set_gradient_sync(run.net, last)
        sharded_or_one = run.sharded or proc.world == 1
        sync = contextlib.nullcontext() if sharded_or_one or last else run.net.no_sync()
        with sync:
            with run.autocast:
                loss = lm_loss(run.fwd(x), y) / train_cfg.grad_accum
            loss.backward()
        loss_sum += loss.detach()
    loss_t = proc.sum(loss_sum) / proc.world
    if run.sharded:
        parallel.average_replicated(run.model)
    return StepResult(lr, loss_t, clip(run.model, train_cfg.grad_clip))


def clip(model: torch.nn.Module, max_norm: float) -> torch.Tensor:
    """Clip the gradients to a global norm of `max_norm` (0: no clipping) and return the
    norm before clipping: torch's clip_grad_norm_ in its two halves, so that under fsdp
    the norm of the sharded gradients is made whole (the norm over every process's
    shards) before it scales them."""
    params = [p for p in model.parameters() if p.grad is not None]
    sharded = [p.grad for p in params if parallel.is_sharded(p)]
    whole = [p.grad for p in params if not parallel.is_sharded(p)]
    norms = [parallel.full_value(torch.nn.utils.get_total_norm(sharded))] if sharded else []
    if whole or not sharded:
        norms.append(torch.nn.utils.get_total_norm(whole))
    total = norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms))
    torch.nn.utils.clip_grads_with_norm_(params, max_norm if max_norm > 0 else math.inf, total)
    return total


def optimizer_step(optimizer: Optimizer) -> str | None:
    """optimizer.step(); a non-finite value inside AdamW (an overflowing update) is
    divergence, reported like a non-finite loss rather than as a traceback."""
    try:
        optimizer.step()
    except RuntimeError as e:
        if "overflow" not in str(e) and "inf" not in str(e).lower():
            raise
        return f"the optimizer update overflowed ({e})"
    return None


def apply_step(run: Run, step: int, result: StepResult, read_now: bool) -> tuple[str, int] | None:
    """Finish step `step` (0-based) into step + 1: read its values when `read_now`, then
    update and clear the gradients. Returns (what diverged, at which step) instead of
    updating when a read finds a non-finite value, or when the update overflows."""
    done = step + 1
    run.reads.record(done, result.loss, result.grad_norm)
    diverged = run.reads.read(done, result.loss, result.grad_norm) if read_now else None
    if diverged is None:
        problem = optimizer_step(run.optimizer)
        diverged = None if problem is None else (problem, done)
    if diverged:
        return diverged
    run.model.after_optimizer_step()  # nGPT's weights back on the sphere
    run.optimizer.zero_grad(set_to_none=True)
    return None
