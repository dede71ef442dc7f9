"""Checkpoints that lose nothing: RUN/checkpoints/step_NNNNNNN/{model.safetensors,state.pt}.

A checkpoint is written into a hidden temporary folder and renamed into place,
so a crash leaves either a complete checkpoint or a `.tmp-*` folder that is
ignored (and removed by the next trainer, see depthlab.outdir.remove_leftovers).
Loading falls back to the previous checkpoint when the newest one is unreadable,
and reports every unreadable one, so a resume can refuse rather than start over.
Pruning only removes checkpoints older than the one just written: a damaged
folder with a higher step number never pushes a good checkpoint out.
state.pt holds the optimizer (both, with Muon), the step and the RNG states; the data position is
the step itself (see depthlab.train.batches).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from depthlab.atomic import DIR_MODE, atomic_write
from depthlab.errors import UserError
from depthlab.rundir import STATE_FILE, WEIGHTS_FILE, load_weights, save_weights
from depthlab.train.optim import Optimizer

CHECKPOINTS_DIR = "checkpoints"
_NAME = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    weights: dict[str, torch.Tensor]
    state: dict[str, Any]


def checkpoint_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """Complete-looking checkpoint folders, oldest first."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _NAME.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


def save_checkpoint(run_dir: Path, step: int, model: torch.nn.Module,
                    optimizer: Optimizer, keep: int, **extra: Any) -> Path:
    """Write checkpoint `step`, refresh RUN/model.safetensors, keep the newest `keep`."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:07d}"
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    os.chmod(tmp, DIR_MODE)  # mkdtemp's folder is private; a checkpoint is not
    try:
        try:
            save_weights(tmp, model)
            state = {"step": step, "optimizer": optimizer.state_dict(),
                     "torch_rng": torch.get_rng_state(), **extra}
            atomic_write(tmp / STATE_FILE, lambda path: torch.save(state, path))  # + fsynced
        except OSError as e:  # named as the file it was to become, not its stage
            name = Path(e.filename).name if e.filename else STATE_FILE
            raise OSError(e.errno, e.strerror, str(final / name)) from None
        if final.exists() and not remove_checkpoint(final):
            raise UserError(f"{final}: holds files depthlab did not write "
                            f"({', '.join(sorted(p.name for p in final.iterdir()))}); the "
                            f"checkpoint of step {step} was not saved there; move them away")
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the stage this call made (mkdtemp: its own)
    save_weights(run_dir, model)
    older = [path for s, path in checkpoint_dirs(run_dir) if s < step]
    for old in older[:max(0, len(older) - (keep - 1))]:
        remove_checkpoint(old)
    return final


def remove_checkpoint(folder: Path) -> bool:
    """Delete a checkpoint's own two files and then its folder, unless something else is in
    it (a note someone put there stays, in its folder); whether the folder went."""
    for name in (WEIGHTS_FILE, STATE_FILE):
        (folder / name).unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:
        return False
    return True


def load_checkpoint(path: Path, step: int) -> Checkpoint:
    """Read one checkpoint folder; ValueError names the file that is damaged."""
    try:
        weights = load_weights(path / WEIGHTS_FILE)
    except Exception as e:
        raise ValueError(f"{path / WEIGHTS_FILE}: {e}") from None
    try:
        state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ValueError(f"{path / STATE_FILE}: unreadable ({type(e).__name__})") from None
    if not isinstance(state, dict) or state.get("step") != step:
        found = state.get("step") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"{path / STATE_FILE}: says step {found}, the folder says {step}")
    return Checkpoint(path, step, weights, state)


def load_latest(run_dir: Path) -> tuple[Checkpoint | None, list[str]]:
    """The newest readable checkpoint (or None) and one line for each unreadable one
    that is newer than it."""
    damaged = []
    for step, path in reversed(checkpoint_dirs(run_dir)):
        try:
            return load_checkpoint(path, step), damaged
        except ValueError as e:  # a half-written or damaged checkpoint: try the previous one
            damaged.append(str(e))
    return None, damaged
