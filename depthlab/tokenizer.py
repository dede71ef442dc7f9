"""Tokenizers (char, byte-level BPE) and the token-id cache the trainer reads.

Encoding a corpus is done once: the tokenizer and the ids (a uint16/uint32 file
read through numpy.memmap, split into train and val at a fixed point) are cached
under a key made of the corpus's content hash and the tokenizer settings, in
$DEPTHLAB_CACHE (default ~/.cache/depthlab).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from depthlab.atomic import atomic_write, atomic_write_text
from depthlab.config import DataConfig
from depthlab.corpus import load_corpus
from depthlab.errors import UserError, read_json_object

CACHE_VERSION = 1
TOKENIZER_FILE = "tokenizer.json"


class Tokenizer(Protocol):
    kind: str

    @property
    def vocab_size(self) -> int: ...
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...
    def token_str(self, i: int) -> str: ...
    def save(self, path: Path) -> None: ...


class CharTokenizer:
    """One id per character, ids in sorted character order (nanoGPT's shakespeare_char)."""

    kind = "char"

    def __init__(self, chars: list[str]) -> None:
        self.chars = list(chars)
        self.index = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def train(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.index[c] for c in text]
        except KeyError as e:
            raise UserError(
                f"character {e.args[0]!r} is not in this char tokenizer's vocabulary"
            ) from None

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def token_str(self, i: int) -> str:
        return self.chars[i]

    def save(self, path: Path) -> None:
        record = {"kind": "char", "chars": self.chars}
        atomic_write_text(Path(path), json.dumps(record, ensure_ascii=False))


class BPETokenizer:
    """Byte-level BPE (GPT-2 style) trained with Hugging Face `tokenizers`: any text,
    Chinese included, round-trips exactly."""

    kind = "bpe"

    def __init__(self, hf_tokenizer) -> None:  # tokenizers.Tokenizer
        self.hf = hf_tokenizer

    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer  # only BPE runs load it
        from tokenizers import decoders, models, pre_tokenizers, trainers

        tok = HFTokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        # Lines as the training iterator keep memory flat on large corpora.
        tok.train_from_iterator(text.splitlines(keepends=True), trainer=trainer)
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text).ids

    def encode_batch(self, lines: list[str]) -> list[list[int]]:
        return [e.ids for e in self.hf.encode_batch(lines)]

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(ids)

    def token_str(self, i: int) -> str:
        return self.hf.decode([i])

    def save(self, path: Path) -> None:
        atomic_write(Path(path), lambda tmp: self.hf.save(str(tmp)))


def load_tokenizer(path: Path) -> Tokenizer:
    """Read a tokenizer.json written by either tokenizer kind."""
    path = Path(path)
    record = read_json_object(path, "no such tokenizer file")
    if record.get("kind") == "char":
        chars = record.get("chars")
        if not isinstance(chars, list) or not chars or not all(
                isinstance(c, str) and len(c) == 1 for c in chars):
            raise UserError(f"{path}: field chars must be a non-empty list of single "
                            f"characters, got {type(chars).__name__}")
        if len(set(chars)) != len(chars):
            raise UserError(f"{path}: field chars lists a character twice")
        return CharTokenizer(chars)
    from tokenizers import Tokenizer as HFTokenizer  # only BPE runs load it

    try:
        return BPETokenizer(HFTokenizer.from_file(str(path)))
    except Exception as e:  # tokenizers raises a bare Exception on bad files
        raise UserError(f"{path}: not a valid tokenizer file ({e})") from None


def train_tokenizer(text: str, data: DataConfig) -> Tokenizer:
    if data.tokenizer == "char":
        return CharTokenizer.train(text)
    return BPETokenizer.train(text, data.bpe_vocab)


# --- the token cache -----------------------------------------------------------------

def cache_dir() -> Path:
    return Path(os.environ.get("DEPTHLAB_CACHE") or Path.home() / ".cache" / "depthlab")


@dataclass(frozen=True)
class TokenData:
    """A corpus encoded once: the tokenizer and the train/val ids (read-only memmaps)."""

    tokenizer: Tokenizer
    train: np.ndarray
    val: np.ndarray
    path: Path  # the cache entry
    corpus: str  # the corpus spec
    corpus_sha256: str
    from_cache: bool  # False when this call trained and encoded

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size


def cache_key(corpus_sha256: str, data: DataConfig) -> str:
    settings = {"v": CACHE_VERSION, "corpus": corpus_sha256, "tokenizer": data.tokenizer,
                "bpe_vocab": data.bpe_vocab if data.tokenizer == "bpe" else None,
                "val_fraction": data.val_fraction}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return f"{data.tokenizer}-{corpus_sha256[:12]}-{digest}"


def _encode_all(tok: Tokenizer, text: str) -> np.ndarray:
    if isinstance(tok, BPETokenizer):
        # Line by line in parallel (encode_batch); the ids still decode to the exact text.
        lines = text.splitlines(keepends=True)
        ids: list[int] = []
        for chunk in tok.encode_batch(lines):
            ids.extend(chunk)
    else:
        ids = tok.encode(text)
    dtype = np.uint16 if tok.vocab_size <= 65536 else np.uint32
    return np.asarray(ids, dtype=dtype)


def prepare_data(data: DataConfig, root: Path | None = None) -> TokenData:
    """Load the corpus, train the tokenizer and encode, or reuse the cached result."""
    corpus = load_corpus(data.corpus)
    sha = corpus.sha256
    entry = Path(root or cache_dir()) / cache_key(sha, data)
    from_cache = (entry / "meta.json").exists()
    if not from_cache:
        _build_entry(entry, corpus.text, data)
    return _open_entry(entry, data.corpus, sha, from_cache)


def _build_entry(entry: Path, text: str, data: DataConfig) -> None:
    tok = train_tokenizer(text, data)
    ids = _encode_all(tok, text)
    n_val = max(1, int(len(ids) * data.val_fraction))
    split = len(ids) - n_val  # fixed split: the last val_fraction of the token stream
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        tok.save(tmp / TOKENIZER_FILE)
        ids[:split].tofile(tmp / "train.bin")
        ids[split:].tofile(tmp / "val.bin")
        meta = {"dtype": str(ids.dtype), "n_train": int(split), "n_val": int(n_val),
                "vocab_size": tok.vocab_size, "tokenizer": tok.kind}
        (tmp / "meta.json").write_text(json.dumps(meta))
        try:
            os.rename(tmp, entry)  # atomic; loses the race quietly if another process won
        except OSError:
            if not (entry / "meta.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ids(path: Path, dtype: np.dtype) -> np.ndarray:
    """A split's tokens; np.memmap refuses an empty file, which a tiny corpus can give
    (the trainer then refuses the corpus with the size it needs)."""
    return np.memmap(path, dtype=dtype, mode="r") if path.stat().st_size else np.empty(0, dtype)


def _open_entry(entry: Path, spec: str, sha: str, from_cache: bool) -> TokenData:
    meta = json.loads((entry / "meta.json").read_text())
    dtype = np.dtype(meta["dtype"])
    train, val = _ids(entry / "train.bin", dtype), _ids(entry / "val.bin", dtype)
    tok = load_tokenizer(entry / TOKENIZER_FILE)
    return TokenData(tok, train, val, entry, spec, sha, from_cache)
