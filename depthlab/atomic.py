"""Files that appear whole or not at all: write to a temporary name, fsync, rename.

The bottom layer of the package's storage (it imports nothing from depthlab), so the
run directory, the tokenizer, the metric log, checkpoints and Hugging Face imports
all write through the same two functions without importing one another.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
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


# How the writers that do not raise OSError say a write failed: safetensors' SafetensorError
# quotes the OS ("No space left on device"); torch.save's RuntimeError says only
# "[enforce fail at inline_container.cc:...] ... file write failed".
_OS_WORDS = {errno.ENOSPC: "No space left on device", errno.EFBIG: "File too large",
             errno.EDQUOT: "Disk quota exceeded", errno.EROFS: "Read-only file system",
             errno.EIO: "Input/output error"}
_FAILED_WRITE_WORDS = ("file write failed", "inline_container", "unexpected pos")


def write_error(e: BaseException, path: Path | str) -> OSError | None:
    """The OSError naming `path` that `e` stands for when it is a failed write, whatever
    raised it (the OS, safetensors, torch's serializer); None when it is something else."""
    if isinstance(e, OSError):
        return OSError(e.errno, e.strerror or str(e), str(path))
    text = str(e)
    for code, words in _OS_WORDS.items():
        if words in text:
            return OSError(code, words, str(path))
    if isinstance(e, RuntimeError) and any(w in text for w in _FAILED_WRITE_WORDS):
        code = _likely_cause(Path(path).parent)
        return OSError(code, _OS_WORDS[code], str(path))
    return None


def _likely_cause(folder: Path) -> int:
    """torch's writer drops errno: a full disk, else a file-size limit (ulimit -f), else I/O."""
    try:
        if shutil.disk_usage(folder).free < (1 << 20):
            return errno.ENOSPC
    except OSError:
        pass
    if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
        return errno.EFBIG
    return errno.EIO


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp_path), fsync, then rename over `path` (atomic on POSIX): a crash
    leaves the old file or the new one, never half of one. The file gets the mode an
    open() would give it (0644 under the usual umask), not mkstemp's 0600. A failed write
    is an OSError naming `path`, whoever raised it (`write_error`)."""
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
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        other_file = isinstance(e, OSError) and e.filename is not None and os.fspath(
            e.filename) != tmp  # a source the write read, named as it is
        failed = write_error(e, path) if isinstance(e, Exception) and not other_file else None
        if failed is not None:
            raise failed from None
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
