"""Checkpoints that lose nothing: RUN/checkpoints/step_NNNNNNN/{model.safetensors,state.pt}.

A checkpoint is written into a hidden temporary folder and renamed into place,
so a crash leaves either a complete checkpoint or a `.tmp-*` folder that is
ignored. Loading falls back to the previous checkpoint when the newest one is
unreadable. state.pt holds the optimizer, the step and the RNG states; the data
position is the step itself (see depthlab.train.batches).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from depthlab.rundir import WEIGHTS_FILE, atomic_write, load_weights, save_weights

CHECKPOINTS_DIR = "checkpoints"
STATE_FILE = "state.pt"
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
                    optimizer: torch.optim.Optimizer, keep: int, **extra: Any) -> Path:
    """Write checkpoint `step`, refresh RUN/model.safetensors, keep the newest `keep`."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:07d}"
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        save_weights(tmp, model)
        state = {"step": step, "optimizer": optimizer.state_dict(),
                 "torch_rng": torch.get_rng_state(), **extra}
        atomic_write(tmp / STATE_FILE, lambda path: torch.save(state, path))  # written + fsynced
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    save_weights(run_dir, model)
    for _, old in checkpoint_dirs(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_latest(run_dir: Path) -> Checkpoint | None:
    """The newest readable checkpoint, or None; unreadable ones are reported and skipped."""
    for step, path in reversed(checkpoint_dirs(run_dir)):
        try:
            weights = load_weights(path / WEIGHTS_FILE)
            state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)
            if state.get("step") != step:
                raise ValueError(f"state.pt says step {state.get('step')}")
        except Exception as e:  # a half-written or damaged checkpoint: try the previous one
            print(f"depthlab: skipping unreadable checkpoint {path} ({e})", file=sys.stderr)
            continue
        return Checkpoint(path, step, weights, state)
    return None
