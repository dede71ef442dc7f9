"""How many CPU threads torch gets: one rule for every command that runs a model.

One thread for models up to d_model 256 and under torchrun: bench/train_speed.py found
that two threads never paid for their extra CPU time at the course shapes. A wider model
(SmolLM2 is d_model 576) that only runs forward (generate, probes, conversions) gets the
cores this process may use that the machine is not already busy with: the cores minus
the 1-minute load average, at least one. On a busy 2-core machine `generate` of SmolLM2
ran eight times slower on two threads than on one, because the threads waited on each
other behind other work. Training a wide model takes every usable core whatever the
load, so its thread count, and with it the rounding of its reductions, is the same on
every run of the same command (the same numbers, and a resume that continues bitwise);
`--threads 1` is the choice when the machine is busy.

`--threads N` (train.threads for training) overrides the rule, from 1 up to the cores
this process may use; 0 means the rule. Beyond the cores torch itself can crash.
"""

from __future__ import annotations

import argparse
import os

from depthlab.errors import UserError

SMALL_D_MODEL = 256  # up to this width one thread is fastest per CPU-second

HELP = ("torch threads, 1 to the cores this process may use; default 0: automatic: one "
        "for models up to d_model 256, else the idle cores (cores minus the 1-minute load "
        "average, at least one)")
TRAIN_HELP = ("torch threads, 1 to the cores this process may use; default 0: automatic: one "
              "for models up to d_model 256, else every usable core, whatever the load, so a "
              "run repeats bitwise (give 1 when anything else runs)")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), else the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this system
        return 0.0


def auto_threads(d_model: int | None, world: int = 1, cores: int | None = None,
                 load: float | None = None, training: bool = False) -> int:
    """The rule for `--threads 0`: `d_model` None is a model of unknown width (a
    checkpoint being converted), treated as wide. `training`: a wide model gets every
    usable core, not the idle ones, so the count does not depend on the load."""
    if world > 1 or (d_model is not None and d_model <= SMALL_D_MODEL):
        return 1
    cores = usable_cores() if cores is None else cores
    if training:
        return cores
    load = _load() if load is None else load
    return max(1, cores - int(load))


def check_threads(requested: int, name: str = "--threads") -> int:
    """`requested` if it is 0 (automatic) or within the usable cores; else one line."""
    cores = usable_cores()
    if not 0 <= requested <= cores:
        raise UserError(f"{name} must be between 1 and {cores} (the cores this process may "
                        f"use), or 0 for automatic; got {requested}")
    return requested


def use_threads(requested: int, d_model: int | None, world: int = 1,
                name: str = "--threads", training: bool = False) -> int:
    """Set torch's thread count from `requested` (0: the rule) and return it."""
    import torch

    n = check_threads(requested, name) or auto_threads(d_model, world, training=training)
    torch.set_num_threads(n)
    return n


def add_threads_arg(parser: argparse.ArgumentParser, help_text: str = HELP) -> None:
    parser.add_argument("--threads", type=int, default=0, metavar="N", help=help_text)
