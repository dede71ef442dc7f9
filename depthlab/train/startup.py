"""How a trainer takes a run directory: lock it, clean up after a killed writer, and
decide between a fresh start, a resume and "already finished" without losing work.

The rules (docs/reliability.md):
- one process per run directory (depthlab.rundir.DirLock; rank 0 under torchrun);
- a fresh run needs an empty directory, or --overwrite, which replaces only a run
  depthlab wrote (depthlab.outdir);
- --resume continues from the newest readable checkpoint; when checkpoints exist
  but none is readable it refuses and names the damaged files, it never starts over
  on top of a run's weights and log;
- a finished run resumed again is left untouched.
Every decision is made on rank 0 and shared, so all ranks fail or proceed together.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

from depthlab.config import Config
from depthlab.corpus import CORPORA
from depthlab.errors import UserError
from depthlab.outdir import (
    RUN,
    Claim,
    check_not_inside,
    check_target,
    clear_run,
    remove_leftovers,
    survey,
)
from depthlab.rundir import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    config_changes,
    describe_changes,
    read_config,
    run_contents,
)
from depthlab.train import runtime
from depthlab.train.checkpoint import CHECKPOINTS_DIR, Checkpoint, load_checkpoint, load_latest

T = TypeVar("T")


def on_rank0(proc: runtime.Runtime, fn: Callable[[], T]) -> T | None:
    """Run fn on rank 0 only; if it raises a UserError every rank raises one, so no
    rank is left waiting at a barrier for a peer that has quit."""
    result, error = None, None
    if proc.is_main:
        try:
            result = fn()
        except UserError as e:
            error = e
    failed = proc.sum(torch.tensor(float(error is not None), device=proc.device)).item() > 0
    if failed:
        raise error or UserError("rank 0 refused the run; see its message")
    return result


def share_int(proc: runtime.Runtime, value: int | None) -> int:
    """Rank 0's integer, on every rank."""
    t = torch.tensor(float(value if proc.is_main else 0), dtype=torch.float64, device=proc.device)
    return int(proc.sum(t).item())


def claim(run_dir: Path, proc: runtime.Runtime) -> Claim | None:
    """Lock the run directory (rank 0) and, in a run depthlab wrote, remove what a killed
    write left behind (elsewhere such names may be the user's: they stay)."""
    def take() -> Claim:
        lock = Claim(run_dir).acquire()
        if survey(run_dir).kind == RUN:
            removed = remove_leftovers(run_dir)
            if removed:
                print(f"depthlab: removed {len(removed)} leftover temporary file(s) of an "
                      f"interrupted write in {run_dir}", file=sys.stderr)
        return lock

    return on_rank0(proc, take)


@dataclass(frozen=True)
class Start:
    ckpt: Checkpoint | None  # None: a fresh run
    notes: tuple[str, ...] = ()  # unreadable checkpoints that were passed over


def check_resume_config(run_dir: Path, cfg: Config) -> None:
    stored, _ = read_config(run_dir)
    changed = config_changes(stored, cfg)
    if changed:
        raise UserError(f"{run_dir}: --resume needs the run's own config; these differ: "
                        f"{describe_changes(changed, 3)}")


def decide(run_dir: Path, cfg: Config, resume: bool, overwrite: bool) -> Start:
    """Rank 0: a fresh start, a resume point, or a refusal (UserError)."""
    if cfg.data.corpus not in CORPORA:  # a text inside the run would be read, then emptied
        check_not_inside(run_dir, cfg.data.corpus, "--corpus")
    contents = run_contents(run_dir)
    if not contents:
        return Start(None)
    shown = ", ".join(contents[:4]) + (", ..." if len(contents) > 4 else "")
    if overwrite:
        check_target(run_dir, RUN, replace=True, replace_flag="--overwrite")
        clear_run(run_dir)
        return Start(None)
    if not resume:
        what = "already holds a run" if CONFIG_FILE in contents else "is not empty"
        raise UserError(f"{run_dir}: {what} ({shown}); pass --resume to continue it, "
                        "--overwrite to replace it, or choose another --out")
    if CONFIG_FILE not in contents:
        raise UserError(f"{run_dir}: holds {shown} but no {CONFIG_FILE}, so it is not a run to "
                        "resume; pass --overwrite to replace it or choose another --out")
    check_resume_config(run_dir, cfg)
    ckpt, damaged = load_latest(run_dir)
    if ckpt is not None:
        return Start(ckpt, tuple(damaged))
    if damaged:
        raise UserError(f"{run_dir}: no readable checkpoint to resume from; damaged: "
                        f"{'; '.join(damaged)}. Nothing was changed; --overwrite starts over")
    if WEIGHTS_FILE in contents:
        raise UserError(f"{run_dir}: has {WEIGHTS_FILE} but no {CHECKPOINTS_DIR}/ to resume "
                        "from; nothing was changed; --overwrite starts over")
    clear_run(run_dir, "--resume")  # stopped before its first checkpoint: nothing saved to lose
    return Start(None)


def agree_on_start(run_dir: Path, cfg: Config, proc: runtime.Runtime, resume: bool,
                   overwrite: bool) -> Checkpoint | None:
    """Decide on rank 0; the other ranks load the same checkpoint."""
    start = on_rank0(proc, lambda: decide(run_dir, cfg, resume, overwrite))
    if proc.is_main:
        for note in start.notes:
            print(f"depthlab: skipping unreadable checkpoint ({note})", file=sys.stderr)
    step = share_int(proc, start.ckpt.step if start is not None and start.ckpt else -1)
    if proc.is_main:
        return start.ckpt
    if step < 0:
        return None
    return load_checkpoint(Path(run_dir) / CHECKPOINTS_DIR / f"step_{step:07d}", step)
