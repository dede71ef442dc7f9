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

Under train.parallel=fsdp a checkpoint is a DCP folder instead (depthlab.dcp), and
there is no RUN/model.safetensors (depthlab.rundir.weights_source reads the folder): every
process writes its shards of the model and of the optimizer into the same hidden folder,
rank 0 adds state.pt (step, RNG, data position, no optimizer) and renames it into place,
so the same rule holds: a crash leaves the previous checkpoint whole. DCP reshards on
load: a checkpoint written by N processes resumes on any number, fsdp or not.
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
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from depthlab.atomic import DIR_MODE, atomic_write
from depthlab.dcp import MODEL_KEY, OPTIMIZER_KEY, is_dcp, saved_model_keys
from depthlab.errors import UserError
from depthlab.rundir import (
    STATE_FILE,
    WEIGHTS_FILE,
    is_checkpoint_file,
    load_weights,
    save_weights,
)
from depthlab.train.optim import Optimizer

CHECKPOINTS_DIR = "checkpoints"
_NAME = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    weights: dict[str, torch.Tensor] | None  # None: a DCP folder, read into the model later
    state: dict[str, Any]

    @property
    def sharded(self) -> bool:
        return self.weights is None


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


def put_in_place(stage: Path, final: Path, step: int) -> None:
    """Rename a written checkpoint stage to its step's folder, replacing only a checkpoint
    depthlab wrote there (a re-saved step); anything else is refused by name."""
    if final.exists() and not remove_checkpoint(final):
        raise UserError(f"{final}: holds files depthlab did not write "
                        f"({', '.join(sorted(p.name for p in final.iterdir()))}); the "
                        f"checkpoint of step {step} was not saved there; move them away")
    os.rename(stage, final)


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
        put_in_place(tmp, final, step)
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
    for file in list(folder.iterdir()) if folder.is_dir() else ():
        if is_checkpoint_file(file.name) and not file.is_dir():
            file.unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:
        return False
    return True


def load_checkpoint(path: Path, step: int) -> Checkpoint:
    """Read one checkpoint folder; ValueError names the file that is damaged. A DCP
    folder's index is read here, its tensors when the model and optimizer exist."""
    weights = None
    if is_dcp(path):
        try:
            saved_model_keys(path)
        except UserError as e:
            raise ValueError(str(e)) from None
    else:
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


def optimizer_parts(optimizer: Optimizer) -> tuple[torch.optim.Optimizer, ...]:
    """The torch optimizers that make up `optimizer` (Muon and AdamW, or AdamW)."""
    parts = getattr(optimizer, "parts", None)
    return tuple(parts.values()) if parts is not None else (optimizer,)


def save_sharded_checkpoint(run_dir: Path, step: int, model: torch.nn.Module,
                            optimizer: Optimizer, keep: int, is_main: bool,
                            **extra: Any) -> Path:
    """Every process: write checkpoint `step` as a DCP folder (a collective). Rank 0 makes
    the hidden stage, adds state.pt, renames it into place, drops RUN/model.safetensors
    (the newest weights are now this folder's) and prunes the older checkpoints."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    final = root / f"step_{step:07d}"
    name: list[str | None] = [None]
    if is_main:
        root.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        os.chmod(stage, DIR_MODE)
        name = [stage.name]
    dist.broadcast_object_list(name, src=0)
    tmp = root / str(name[0])
    try:
        model_sd, optim_sd = get_state_dict(model, optimizer_parts(optimizer))
        dcp.save({MODEL_KEY: model_sd, OPTIMIZER_KEY: optim_sd}, checkpoint_id=str(tmp))
        if is_main:
            state = {"step": step, "torch_rng": torch.get_rng_state(), "parallel": "fsdp",
                     "world_size": dist.get_world_size(), **extra}
            try:
                atomic_write(tmp / STATE_FILE, lambda path: torch.save(state, path))
            except OSError as e:
                raise OSError(e.errno, e.strerror, str(final / STATE_FILE)) from None
            put_in_place(tmp, final, step)
    finally:
        if is_main:
            shutil.rmtree(tmp, ignore_errors=True)
    if is_main:
        (Path(run_dir) / WEIGHTS_FILE).unlink(missing_ok=True)
        older = [path for s, path in checkpoint_dirs(run_dir) if s < step]
        for old in older[:max(0, len(older) - (keep - 1))]:
            remove_checkpoint(old)
    return final


def restore_sharded(model: torch.nn.Module, optimizer: Optimizer, ckpt: Checkpoint) -> None:
    """Load a DCP checkpoint's model and optimizer into `model` (sharded by fsdp, or whole
    in one process or under ddp) and its optimizer: DCP reads each process's part of
    whatever world wrote it. One line naming the folder when it does not fit."""
    parts = optimizer_parts(optimizer)
    own = set(model.state_dict())
    saved = saved_model_keys(ckpt.path)
    if own != saved:
        raise UserError(f"{ckpt.path}: does not fit this run's model (missing tensors "
                        f"{sorted(own - saved)[:3]}, unexpected {sorted(saved - own)[:3]}); "
                        "nothing was changed")
    model_sd, optim_sd = get_state_dict(model, parts)
    state = {MODEL_KEY: model_sd, OPTIMIZER_KEY: optim_sd}
    try:
        dcp.load(state, checkpoint_id=str(ckpt.path))
    except Exception as e:  # noqa: BLE001 - shapes that differ, a truncated data file
        detail = (str(e).strip().splitlines() or [""])[0][:200]
        raise UserError(f"{ckpt.path}: does not fit this run ({type(e).__name__}: {detail}); "
                        "nothing was changed") from None
    set_state_dict(model, parts, model_state_dict=state[MODEL_KEY],
                   optim_state_dict=state[OPTIMIZER_KEY])
