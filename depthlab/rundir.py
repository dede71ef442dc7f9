"""The run directory: the unit every command reads and writes.

    RUN/config.json        {"config": {model, data, train}, provenance...}
    RUN/model.safetensors  the latest weights (Transformer.state_dict())
    RUN/tokenizer.json     the tokenizer (when the run has one)
    RUN/metrics.jsonl      one JSON object per line (see depthlab.metrics)
    RUN/checkpoints/       full training state, owned by the trainer

Every file is written to a temporary name and renamed, so a crash leaves the
old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from depthlab.config import Config
from depthlab.errors import UserError, read_json_object

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
METRICS_FILE = "metrics.jsonl"


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp_path), fsync, then rename over `path` (atomic on POSIX)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance() -> dict[str, Any]:
    import torch

    from depthlab import __version__

    return {"depthlab_version": __version__, "torch_version": torch.__version__,
            "git_commit": git_commit()}


def write_config(run_dir: Path, cfg: Config, **extra: Any) -> None:
    """config.json: the fully resolved config plus provenance and any extra fields."""
    record = {"config": cfg.to_dict(), **provenance(), **extra}
    atomic_write_text(Path(run_dir) / CONFIG_FILE, json.dumps(record, indent=2, ensure_ascii=False))


def read_config(run_dir: Path) -> tuple[Config, dict[str, Any]]:
    """The run's Config and the whole config.json record."""
    path = Path(run_dir) / CONFIG_FILE
    if not Path(run_dir).is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    record = read_json_object(path, f"missing; is {run_dir} a depthlab run directory?")
    return Config.from_dict(record.get("config", record)), record


def save_weights(run_dir: Path, model: Any, name: str = WEIGHTS_FILE) -> None:
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    atomic_write(Path(run_dir) / name, lambda tmp: save_file(state, str(tmp)))


def load_weights(path: Path) -> dict[str, Any]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not Path(path).exists():
        raise UserError(f"{path}: no such weights file")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise UserError(f"{path}: not a readable safetensors file ({e})") from None


def load_model(run_dir: Path, device: str = "cpu"):  # -> tuple[Transformer, Config]
    """Rebuild the model of a run directory with its latest weights."""
    from depthlab.model import Transformer

    cfg, _ = read_config(run_dir)
    model = Transformer(cfg.model)
    state = load_weights(Path(run_dir) / WEIGHTS_FILE)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise UserError(
            f"{Path(run_dir) / WEIGHTS_FILE}: weights do not fit config.json "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    return model.to(device).eval(), cfg


def load_tokenizer(run_dir: Path):  # -> depthlab.tokenizer.Tokenizer | None
    """The run's tokenizer (char or BPE, from RUN/tokenizer.json), or None when the run
    has none (e.g. imported weights); prompts are then given as token ids."""
    from depthlab.tokenizer import load_tokenizer as read

    path = Path(run_dir) / TOKENIZER_FILE
    return read(path) if path.exists() else None
