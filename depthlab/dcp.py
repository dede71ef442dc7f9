"""Distributed checkpoints (torch.distributed.checkpoint, "DCP"): the folder format an
fsdp run saves its checkpoints in, .metadata (the index) + __RANK_N.distcp files, and
reading a model's weights out of one. DCP reads without a process group and reshards, so
one process reads what any number of processes wrote. Where a run keeps such folders is
depthlab.rundir's (`weights_source`) and depthlab.train.checkpoint's business.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from depthlab.errors import UserError

DCP_METADATA = ".metadata"  # a distributed checkpoint's index
DCP_DATA = re.compile(r"__\d+_\d+\.distcp")  # and its data files, one or more per rank
MODEL_KEY = "model"  # the model's state dict inside a checkpoint: model.<parameter name>
OPTIMIZER_KEY = "optimizer"


def is_dcp(folder: Path) -> bool:
    return (Path(folder) / DCP_METADATA).is_file()


def is_dcp_file(name: str) -> bool:
    """A file DCP writes (and the index a killed write left as .metadata.tmp)."""
    return name in (DCP_METADATA, DCP_METADATA + ".tmp") or DCP_DATA.fullmatch(name) is not None
def saved_model_keys(folder: Path) -> set[str]:
    """The model's tensor names a DCP folder holds (from its .metadata)."""
    from torch.distributed.checkpoint import FileSystemReader

    try:
        meta = FileSystemReader(str(folder)).read_metadata()
    except Exception as e:  # noqa: BLE001 - a damaged index, whatever torch raises
        raise UserError(f"{Path(folder) / DCP_METADATA}: not a readable distributed "
                        f"checkpoint index ({type(e).__name__})") from None
    prefix = MODEL_KEY + "."
    return {k[len(prefix):] for k in meta.state_dict_metadata if k.startswith(prefix)}


def read_model(model: Any, folder: Path, what: str) -> None:
    """Fill `model` (its tensors allocated, on any device) with the weights of a DCP
    folder, in place, checking the names first: one line naming the folder otherwise."""
    import torch.distributed.checkpoint as dcp

    own = model.state_dict()
    saved = saved_model_keys(folder)
    missing, unexpected = sorted(set(own) - saved), sorted(saved - set(own))
    if missing or unexpected:
        raise UserError(f"{what}: missing tensors {missing[:3]}, unexpected {unexpected[:3]}")
    try:
        dcp.load({MODEL_KEY: own}, checkpoint_id=str(folder))
    except Exception as e:  # noqa: BLE001 - shapes that differ, a truncated data file
        detail = (str(e).strip().splitlines() or [""])[0][:200]
        raise UserError(f"{what} ({type(e).__name__}: {detail})") from None
    model.load_state_dict(own)
