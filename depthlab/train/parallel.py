"""How a run spreads over torchrun's processes: train.parallel=ddp (each process holds the
whole model and optimizer; DistributedDataParallel averages the gradients) or fsdp
(torch's FSDP2, `fully_shard`: each process holds 1/world of every parameter, gradient
and optimizer moment, gathering a block's weights only while it runs).

Both see the same global batch, split by rank (depthlab.train.batches), and average the
gradients, so one process, ddp and fsdp follow the same loss curve to float32 rounding
(tests/test_train_fsdp.py). The choices follow torchtitan: each block is its own FSDP
group and the root (embeddings, final norm, head) another; the stream shortcuts a model
applies outside a block's forward (x0_mix, U-net skips) are groups of their own, so
their weights are gathered when they run; bfloat16 on CUDA keeps float32 master weights
and reduces gradients in float32 (MixedPrecisionPolicy).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

from depthlab.config import Config
from depthlab.errors import UserError

KINDS = ("ddp", "fsdp")


def launched_by_torchrun() -> bool:
    """torchrun (torch.distributed.run) sets these for every process it starts."""
    return all(k in os.environ for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"))


def check(cfg: Config, world: int, launched: bool) -> None:
    """One line, before anything is written, for a parallel setting this launch cannot run."""
    t = cfg.train
    if t.parallel == "fsdp" and not launched:
        raise UserError("train.parallel=fsdp needs torchrun (torchrun --nproc_per_node N -m "
                        "depthlab train ...); one process without torchrun trains unsharded: "
                        "leave train.parallel at ddp")
    if world > 1 and t.batch_size % world:
        raise UserError(f"train.batch_size={t.batch_size} must be divisible by the {world} "
                        f"processes (each takes batch_size / world sequences of every step)")
    if t.parallel == "fsdp" and cfg.model.on_sphere:
        raise UserError(f"model.residual={cfg.model.residual} with train.parallel=fsdp: its "
                        "renormalisation of the weights after every step is not written for "
                        "sharded tensors; use train.parallel=ddp")
    if t.parallel == "fsdp" and t.optimizer == "muon":
        raise UserError("train.optimizer=muon with train.parallel=fsdp: Muon orthogonalises "
                        "each whole matrix and FSDP gives each process only its rows of it; "
                        "use train.parallel=ddp or train.optimizer=adamw")


def checkpoint_blocks(model: nn.Module) -> None:
    """train.activation_checkpointing: each block keeps only its input for backward and
    runs its forward again there (torch.utils.checkpoint, non-reentrant; the RNG is
    replayed), trading one more forward per block for its activations. Forward hooks
    inside a block fire again during that recompute."""
    for block in model.blocks:
        forward = block.forward

        def again(*args: object, _forward=forward, **kwargs: object) -> object:
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        block.forward = again


def mixed_precision(cfg: Config, device: torch.device):  # -> MixedPrecisionPolicy
    """bfloat16 parameters for compute with float32 gradient reduction on CUDA when
    train.dtype=bfloat16 (the master weights and AdamW's moments stay float32); on CPU
    and in float32 everything is float32 (CPU autocast still runs bfloat16 matmuls)."""
    if cfg.train.dtype == "bfloat16" and device.type == "cuda":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def shard(model: nn.Module, cfg: Config, device: torch.device) -> nn.Module:
    """fully_shard the stream shortcuts called outside a block, then each block, then the
    root, on a 1-D mesh over every process (gloo on CPU, NCCL on CUDA)."""
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    kw = {"mesh": mesh, "mp_policy": mixed_precision(cfg, device),
          # fully_shard cannot shard a 0-d tensor: the residuals' and shortcuts' scalars stay
          # whole on every process, their gradients averaged by `average_replicated`
          "ignored_params": {p for p in model.parameters() if p.ndim == 0}}
    for block in model.blocks:
        for part in (block.x0_mix, block.unet_skip):
            if part is not None and any(p.ndim > 0 for p in part.parameters()):
                fully_shard(part, **kw)
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    return model


def is_sharded(t: torch.Tensor) -> bool:
    return isinstance(t, DTensor)


def average_replicated(model: nn.Module) -> None:
    """The gradients of the parameters fsdp leaves whole (the scalars), averaged over the
    processes as ddp averages every gradient: once per step, after the last micro-batch."""
    grads = [p.grad for p in model.parameters() if p.grad is not None and not is_sharded(p)]
    if grads:
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= dist.get_world_size()
        for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
            g.copy_(part.view_as(g))


def set_gradient_sync(net: nn.Module, sync: bool) -> None:
    """FSDP: reduce-scatter the gradients only on a step's last micro-batch (the others
    accumulate unsharded gradients locally)."""
    net.set_requires_gradient_sync(sync)


def full_value(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's whole value (clip_grad_norm_ over sharded gradients returns the global
    norm as one); a plain tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t
