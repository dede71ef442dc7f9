"""Files that appear whole or not at all: write to a temporary name, fsync, rename.

The bottom layer of the package's storage (it imports nothing from depthlab), so the
run directory, the tokenizer, the metric log, checkpoints and Hugging Face imports
all write through the same two functions without importing one another.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def _read_umask() -> int:
    mask = os.umask(0o022)  # reading the mask means setting it: put it straight back
    os.umask(mask)
    return mask


# The process's umask, read once at import (single-threaded then): mkstemp and mkdtemp
# create private 0600 files and 0700 folders, and a run's files are no secret.
UMASK = _read_umask()
FILE_MODE = 0o666 & ~UMASK
DIR_MODE = 0o777 & ~UMASK


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp_path), fsync, then rename over `path` (atomic on POSIX): a crash
    leaves the old file or the new one, never half of one. The file gets the mode an
    open() would give it (0644 under the usual umask), not mkstemp's 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, FILE_MODE)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
