"""The run directory: the unit every command reads and writes.

    RUN/config.json        {"config": {model, data, train}, provenance...}
    RUN/model.safetensors  the latest weights (Transformer.state_dict())
    RUN/tokenizer.json     the tokenizer (when the run has one)
    RUN/metrics.jsonl      one JSON object per line (see depthlab.metrics)
    RUN/checkpoints/       full training state, owned by the trainer
    RUN/.lock              held (flock) by the one process writing the run; never a link
    RUN/.depthlab          {"kind": "run"}: depthlab wrote this directory (depthlab.outdir)

Every file is written to a temporary name and renamed, so a crash leaves the
old file or the new one, never half of one; the leftovers of a killed write are
removed by the next process that takes the lock.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

from depthlab import __version__
from depthlab.atomic import atomic_write, atomic_write_text  # re-exported: callers import them here
from depthlab.config import Config, diff, flatten, refuse_hf_config
from depthlab.dcp import is_dcp, is_dcp_file, read_model
from depthlab.errors import UserError, read_json_object
from depthlab.memory import check_fits

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
METRICS_FILE = "metrics.jsonl"
STATE_FILE = "state.pt"  # RUN/checkpoints/step_NNNNNNN/state.pt (depthlab.train.checkpoint)
LOCK_FILE = ".lock"
MARKER_FILE = ".depthlab"
# Keys that describe where a run executes, not what it computes: a resume may change them
# and the config hash leaves them out. model.vocab_size is decided by the tokenizer from
# data.*, so a grid entry (before tokenizing) and its finished run hash alike.
RUNTIME_KEYS = frozenset({"train.device", "train.threads", "train.compile", "train.parallel",
                          "train.activation_checkpointing"})
DERIVED_KEYS = frozenset({"model.vocab_size"})
# Fields added after runs were recorded, with the value that computes what the model did
# before they existed: left out of the hash at that value, so a run trained before the
# field existed keeps its hash and stays reusable.
ADDED_FIELDS = {"model.norm_scale": "none", "model.value_residual": False, "model.streams": 1,
                "model.x0_mix": False, "model.backout": False, "model.value_embeds": False,
                "model.smear": False, "model.unet_skips": False, "model.logit_softcap": None,
                "model.mixer": "attention", "model.layer_pattern": None,
                "model.linear_key_heads": None, "model.linear_value_heads": None,
                "model.linear_key_dim": None, "model.linear_value_dim": None,
                "model.linear_conv_kernel": 4, "model.rope_fraction": 1.0,
                "data.special_tokens": (), "data.separate_documents": False, "data.shards": "",
                "train.optimizer": "adamw", "train.muon_lr": 0.02, "train.muon_momentum": 0.95}


def config_hash(cfg: Config) -> str:
    """sha256 of what a config computes: every field except RUNTIME_KEYS and DERIVED_KEYS,
    and the ADDED_FIELDS at their old-model values."""
    flat = {k: v for k, v in flatten(cfg).items() if k not in RUNTIME_KEYS | DERIVED_KEYS
            and (k not in ADDED_FIELDS or ADDED_FIELDS[k] != v)}
    return hashlib.sha256(json.dumps(flat, sort_keys=True).encode()).hexdigest()


def config_changes(stored: Config, wanted: Config) -> dict[str, tuple[Any, Any]]:
    """The fields (runtime and derived keys left out) in which two configs differ."""
    return {k: v for k, v in diff(stored, wanted).items()
            if k not in RUNTIME_KEYS | DERIVED_KEYS}


def describe_changes(changes: dict[str, tuple[Any, Any]], limit: int = 4) -> str:
    shown = ", ".join(f"{k} ({a!r} -> {b!r})" for k, (a, b) in list(changes.items())[:limit])
    more = len(changes) - limit
    return shown + (f" and {more} more" if more > 0 else "")


def usable_dir(path: Path, flag: str = "--out") -> Path:
    """Create `path` as a directory, or raise one line saying why it cannot be one."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        reason = "a parent is not a directory" if e.errno == errno.ENOTDIR else e.strerror
        raise UserError(f"{flag} {path}: cannot create the directory ({reason})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: not writable")
    return path


class DirLock:
    """One process at a time in a directory: an exclusive flock on DIR/.lock holding the
    owner's PID. The OS drops the lock when the process dies, so no lock is ever stale.
    The holder removes the file when it lets go; a process that opened the file just
    before that sees, once it has the flock, that the path names another file (or none)
    and tries again, so two processes never both hold "the" lock.

    The lock never follows a link: DIR/.lock is opened with O_NOFOLLOW and must be a
    regular file with one name holding nothing but a PID (what a killed holder leaves),
    so a `.lock` that is a symlink or hard link to someone's file, or any other file, is
    refused by name and left as it is, never truncated."""

    def __init__(self, directory: Path, what: str = "run directory") -> None:
        self.dir = Path(directory)
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> DirLock:
        usable_dir(self.dir)
        path = self.dir / LOCK_FILE
        for _ in range(100):
            fd, created = _open_lock(path)
            if fd is None:
                continue  # removed between two looks: try again
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise UserError(f"{self.dir}: this {self.what} is in use by process "
                                    f"{holder}; wait for it to finish or stop it") from None
                raise UserError(f"{path}: cannot lock ({e.strerror})") from None
            if _same_file(fd, path):
                break
            os.close(fd)  # its holder removed it meanwhile: lock the file that is there now
        else:
            raise UserError(f"{path}: the lock file keeps changing; is another process looping?")
        if not created:
            _check_stale_lock(fd, path)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            if _same_file(self._fd, self.dir / LOCK_FILE):
                (self.dir / LOCK_FILE).unlink(missing_ok=True)  # still held: nobody else has it
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    @staticmethod
    def holder(directory: Path) -> str | None:
        """The PID (as written) of the live process holding DIR/.lock, or None when no
        process holds it. Creates nothing and follows no link."""
        try:
            fd = os.open(Path(directory) / LOCK_FILE,
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None
        except OSError:
            return os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        finally:
            os.close(fd)

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


_NOT_YOURS = "depthlab writes a lock only into a file it creates; nothing was changed"
_PID_LINE = re.compile(rb"\d{1,20}\n?")


def _open_lock(path: Path) -> tuple[int | None, bool]:
    """(fd, created): a new lock file made with O_EXCL, or the existing one opened without
    following a link; (None, False) when it vanished between the two tries."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
    except FileExistsError:
        pass
    except OSError as e:
        raise UserError(f"{path}: cannot create the lock file ({e.strerror})") from None
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None, False
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UserError(f"{path}: is a symbolic link; {_NOT_YOURS} (remove the link)") \
                from None
        raise UserError(f"{path}: cannot open the lock file ({e.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else \
            f"a file with {st.st_nlink} names (a hard link)"
        raise UserError(f"{path}: is {what}; {_NOT_YOURS} (remove it)")
    return fd, False


def _check_stale_lock(fd: int, path: Path) -> None:
    """A lock file found on disk (its holder was killed) holds a PID and nothing else;
    anything else is someone's file, refused before a byte of it changes."""
    content = os.pread(fd, 64, 0)
    if content and not _PID_LINE.fullmatch(content):
        size = os.fstat(fd).st_size
        os.close(fd)
        raise UserError(f"{path}: holds {size:,} bytes that are not a process id; "
                        f"{_NOT_YOURS} (move the file away if it is yours)")


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def is_leftover(name: str) -> bool:
    """A name like those a killed atomic write leaves (`.NAME.*.tmp`, `.tmp-*`): passed over
    when telling what a folder is, never a reason to delete it (depthlab.outdir decides
    what a run owns by exact name)."""
    return name.startswith(".tmp-") or (name.startswith(".") and name.endswith(".tmp"))


def run_contents(run_dir: Path) -> list[str]:
    """The names in a run directory other than its lock file and marker, sorted."""
    if not Path(run_dir).is_dir():
        return []
    return sorted(p.name for p in Path(run_dir).iterdir()
                  if p.name not in (LOCK_FILE, MARKER_FILE))


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance() -> dict[str, Any]:
    import torch  # lazy: the CLI's quick commands never load torch

    return {"depthlab_version": __version__, "torch_version": torch.__version__,
            "git_commit": git_commit()}


def write_config(run_dir: Path, cfg: Config, **extra: Any) -> None:
    """config.json: the fully resolved config plus provenance and any extra fields."""
    record = {"config": cfg.to_dict(), "config_sha256": config_hash(cfg), **provenance(), **extra}
    atomic_write_text(Path(run_dir) / CONFIG_FILE, json.dumps(record, indent=2, ensure_ascii=False))


def read_config(run_dir: Path) -> tuple[Config, dict[str, Any]]:
    """The run's Config and the whole config.json record."""
    path = Path(run_dir) / CONFIG_FILE
    if not Path(run_dir).is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    record = read_json_object(path, f"missing; is {run_dir} a depthlab run directory?")
    refuse_hf_config(record, str(path))
    return Config.from_dict(record.get("config", record)), record


def save_weights(run_dir: Path, model: Any, name: str = WEIGHTS_FILE) -> None:
    from safetensors.torch import save_file  # torch

    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    atomic_write(Path(run_dir) / name, lambda tmp: save_file(state, str(tmp)))


def load_weights(path: Path) -> dict[str, Any]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file  # torch

    if not Path(path).exists():
        raise UserError(f"{path}: no such weights file")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise UserError(f"{path}: not a readable safetensors file ({e})") from None


CHECKPOINTS_DIR = "checkpoints"  # RUN/checkpoints/step_NNNNNNN/ (depthlab.train.checkpoint)
_STEP_DIR = re.compile(r"^step_(\d+)$")


def is_checkpoint_file(name: str) -> bool:
    """A file depthlab writes in a checkpoint folder, of either kind."""
    return name in (WEIGHTS_FILE, STATE_FILE) or is_dcp_file(name)


def newest_dcp(run_dir: Path) -> Path | None:
    """The newest checkpoint folder of a run when it is a DCP folder, else None."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return None
    steps = sorted((int(m.group(1)), p) for p in root.iterdir()
                   if (m := _STEP_DIR.match(p.name)) and p.is_dir())
    return steps[-1][1] if steps and is_dcp(steps[-1][1]) else None


def weights_source(run_dir: Path) -> Path | None:
    """Where a run's newest weights are: RUN/model.safetensors, or, for a run trained with
    train.parallel=fsdp (which writes none: no process ever holds the whole model), its
    newest checkpoint, a DCP folder; None when it has neither. Every reader of a run's
    weights (generate, probe run, hf export, the page) comes here through `load_model`."""
    file = Path(run_dir) / WEIGHTS_FILE
    return file if file.is_file() else newest_dcp(run_dir)


def load_model(run_dir: Path, device: str = "cpu"):  # -> tuple[Transformer, Config]
    """Rebuild the model of a run directory with its latest weights (RUN/model.safetensors,
    or an fsdp run's newest DCP checkpoint: depthlab.dcp). The model is laid
    out on the meta device and takes the file's tensors as its parameters: drawing a
    random init only to overwrite it took SmolLM2's load from 0.1 s to 4 s."""
    import torch

    from depthlab.model import Transformer  # torch

    cfg, _ = read_config(run_dir)
    check_fits(cfg, device, training=False, what=f"{run_dir}/config.json")
    with torch.device("meta"):
        model = Transformer(cfg.model)
    path = weights_source(run_dir) or Path(run_dir) / WEIGHTS_FILE
    if path.is_dir():  # an fsdp run's newest checkpoint, a DCP folder (depthlab.dcp)
        model.to_empty(device="cpu")
        read_model(model, path, f"{path} does not fit {run_dir}/config.json")
        return model.to(device).eval(), cfg
    load_fitting(model, load_weights(path), f"{path} does not fit {run_dir}/config.json",
                 assign=True)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:  # a tensor the file does not hold: never the case for depthlab's own models
        raise UserError(f"{path}: the model's {left[0]} is not in the file")
    return model.to(device).eval(), cfg


def load_fitting(model: Any, state: dict[str, Any], what: str, assign: bool = False) -> None:
    """model.load_state_dict(state), after checking names and shapes so that a mismatch
    is one line naming the tensor and both shapes rather than torch's multi-line error.
    `assign`: the file's tensors become the parameters (a model laid out on the meta
    device), each in the dtype the model declares."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise UserError(f"{what}: missing tensors {missing[:3]}, unexpected {unexpected[:3]}")
    for name, tensor in own.items():
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise UserError(f"{what}: tensor {name} has shape {list(state[name].shape)} in "
                            f"the file but the config makes it {list(tensor.shape)}")
        if assign and state[name].dtype != tensor.dtype:
            state[name] = state[name].to(tensor.dtype)
    model.load_state_dict(state, assign=assign)


def load_tokenizer(run_dir: Path):  # -> depthlab.tokenizer.Tokenizer | None
    """The run's tokenizer (char or BPE, from RUN/tokenizer.json), or None when the run
    has none (e.g. imported weights); prompts are then given as token ids."""
    from depthlab.tokenizer import load_tokenizer as read  # numpy loads only when needed

    path = Path(run_dir) / TOKENIZER_FILE
    return read(path) if path.exists() else None
