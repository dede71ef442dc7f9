"""The race on nanoGPT's ground: a text the user gives, split and scored as nanoGPT's
char-level Shakespeare is, so the reference and every preset are measured on one ruler
that is not depthlab's own.

nanoGPT's `data/shakespeare_char/prepare.py` makes the vocabulary from every character
of the whole text (sorted) and cuts the text at int(0.9 * n) characters: the first part
trains, the rest validates. depthlab's token cache cuts n - int(0.1 * n), one character
later for most lengths, so the race writes its own cache entry with nanoGPT's cut
(`write_cache`) and the trainer reads it as it reads any other.

Every contender is scored on the same windows: `WINDOWS` windows of `WINDOW` characters
drawn once from the validation split with a fixed seed (`fixed_windows`), the mean
cross-entropy of each next character in nats. Its time to the target is the CPU time of
its optimizer steps up to its first evaluation at or below the target (`crossing`).

`nanogpt_lr` is nanoGPT's `get_lr` (train.py): its warmup reaches the peak one step later
than depthlab's `lr_at`, and its cosine ends at lr_decay_iters rather than the last step.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from depthlab.config import DataConfig
from depthlab.errors import UserError
from depthlab.tokenizer import TOKENIZER_FILE, CharTokenizer, cache_key

WINDOWS = 256  # validation windows every contender is scored on
WINDOW = 64  # characters a window predicts (nanoGPT's context in the CPU recipe)
WINDOW_SEED = 0
TRAIN_FRACTION = 0.9  # nanoGPT's prepare.py: train_data = data[:int(n * 0.9)]


@dataclass(frozen=True)
class Split:
    """A text cut as nanoGPT cuts it: the character vocabulary of the whole text and the
    ids of its first 90% (train) and the rest (val)."""

    chars: tuple[str, ...]
    train: np.ndarray
    val: np.ndarray

    @property
    def vocab_size(self) -> int:
        return len(self.chars)


def read_text(path: Path) -> str:
    """The file's text as nanoGPT's prepare.py reads it (UTF-8, newlines universal); a
    missing, unreadable or empty file is one line naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise UserError(f"--text {path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"--text {path}: a folder; give one text file") from None
    except UnicodeDecodeError as e:
        raise UserError(f"--text {path}: not UTF-8 text (bad byte at offset {e.start})") from None
    except OSError as e:
        raise UserError(f"--text {path}: cannot read ({e.strerror})") from None
    if not text:
        raise UserError(f"--text {path}: empty file")
    return text


def min_chars(window: int = WINDOW) -> int:
    """The shortest text whose validation tenth holds one window and its next character."""
    n = window + 1
    while n - int(n * TRAIN_FRACTION) < window + 1:
        n += 1
    return n


def nanogpt_split(text: str, what: str = "the text", window: int = WINDOW) -> Split:
    """nanoGPT's prepare.py: vocabulary sorted(set(text)), train text[:int(n * 0.9)],
    val the rest. A text too short for one validation window is one line."""
    if len(text) - int(len(text) * TRAIN_FRACTION) < window + 1:
        raise UserError(f"{what}: {len(text):,} characters; the race needs at least "
                        f"{min_chars(window):,} (its last 10% must hold a window of {window} "
                        "characters and the one after it)")
    chars = tuple(sorted(set(text)))
    index = {c: i for i, c in enumerate(chars)}
    dtype = np.uint16 if len(chars) <= 65536 else np.uint32
    ids = np.fromiter((index[c] for c in text), dtype=dtype, count=len(text))
    cut = int(len(text) * TRAIN_FRACTION)
    return Split(chars, ids[:cut], ids[cut:])


def fixed_windows(n_val: int, count: int = WINDOWS, length: int = WINDOW,
                  seed: int = WINDOW_SEED) -> np.ndarray:
    """Start offsets of `count` windows of `length` characters (and the character after
    each) drawn uniformly from a validation split of n_val characters with a fixed seed:
    the same offsets for every contender, run and process."""
    if n_val < length + 1:
        raise UserError(f"the validation split holds {n_val} characters; a window needs "
                        f"{length + 1}")
    rng = np.random.Generator(np.random.PCG64(seed))
    return rng.integers(0, n_val - length, size=count)


def window_batch(val: np.ndarray, offsets: np.ndarray, length: int = WINDOW):
    """Inputs and next-character targets [len(offsets), length] as int64 tensors."""
    import torch

    block = np.stack([np.asarray(val[o:o + length + 1], dtype=np.int64) for o in offsets])
    t = torch.from_numpy(block)
    return t[:, :-1], t[:, 1:]


def score(model, x, y, batch: int = 64) -> float:
    """Mean next-character cross-entropy (nats) of `model` (ids -> logits) over the
    windows (x, y), in eval mode without gradients; the model's mode is restored."""
    import torch
    import torch.nn.functional as F

    was_training = model.training
    model.eval()
    total = 0.0
    try:
        with torch.no_grad():
            for i in range(0, len(x), batch):
                logits = model(x[i:i + batch])
                total += F.cross_entropy(logits.flatten(0, 1).float(), y[i:i + batch].flatten(),
                                         reduction="sum").item()
    finally:
        model.train(was_training)
    return total / y.numel()


def check_target(target: float) -> float:
    if not (math.isfinite(target) and target > 0):
        raise UserError(f"--target {target}: must be a loss above 0 (nats per character)")
    return target


@dataclass(frozen=True)
class Crossing:
    """Where a contender first scores at or below the target (step None: never)."""

    step: int | None
    cpu_s: float | None  # CPU seconds of its optimizer steps up to that step
    loss: float | None  # its score there
    last_step: int  # the last step it trained
    last_loss: float | None  # its last score


def crossing(evals: list[tuple[int, float, float]], target: float) -> Crossing:
    """The first of the (step, cpu_s, val_loss) evaluations, in step order, at or below
    the target."""
    evals = sorted(evals)
    last = evals[-1] if evals else (0, 0.0, None)
    for step, cpu_s, loss in evals:
        if loss <= target:
            return Crossing(step, cpu_s, loss, last[0], last[2])
    return Crossing(None, None, None, last[0], last[2])


def nanogpt_lr(it: int, lr: float, min_lr: float, warmup: int, decay_iters: int) -> float:
    """nanoGPT's get_lr: linear warmup to lr over `warmup` iterations, cosine to min_lr at
    decay_iters, min_lr after it."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay_iters:
        return min_lr
    ratio = (it - warmup) / (decay_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def write_cache(root: Path, corpus: str, corpus_sha256: str, split: Split) -> DataConfig:
    """A token-cache entry under `root` holding nanoGPT's cut of the text, keyed as
    depthlab.tokenizer.prepare_data looks it up for a char run of `corpus`; returns that
    run's data config. The entry lives only in the race's own cache folder: a user's
    cache keeps depthlab's cut."""
    data = DataConfig(corpus=corpus, tokenizer="char")
    entry = Path(root) / cache_key(corpus_sha256, data)
    entry.mkdir(parents=True, exist_ok=True)
    CharTokenizer(list(split.chars)).save(entry / TOKENIZER_FILE)
    split.train.tofile(entry / "train.bin")
    split.val.tofile(entry / "val.bin")
    meta = {"dtype": str(split.train.dtype), "n_train": len(split.train),
            "n_val": len(split.val), "vocab_size": split.vocab_size, "tokenizer": "char"}
    (entry / "meta.json").write_text(json.dumps(meta))  # last: its presence marks the entry whole
    return data


class Schedule:
    """When a contender is scored: every `coarse` steps while its score is above the
    target by more than `near`, then every `fine` steps (coarse a multiple of fine).
    Far from the target a score only says "not yet", so most evaluations are saved; the
    crossing is read at fine resolution unless one coarse interval falls from above
    target + near to the target (`Crossing.step` is then that coarse step, and
    `resolution` says so)."""

    def __init__(self, fine: int, coarse: int, near: float, target: float) -> None:
        if fine < 1 or coarse % fine:
            raise UserError(f"--eval-every {fine}: must be a positive divisor of the coarse "
                            f"interval {coarse}")
        self.fine, self.coarse, self.near, self.target = fine, coarse, near, target
        self.close = False  # a score has come within `near` of the target
        self.resolution = fine

    def due(self, step: int) -> bool:
        return step % (self.fine if self.close else self.coarse) == 0

    def scored(self, loss: float) -> None:
        if not self.close and loss <= self.target:
            self.resolution = self.coarse  # reached in one coarse interval
        self.close = self.close or loss <= self.target + self.near
