"""Tokenizers (char, byte-level BPE) and the token-id cache the trainer reads.

Both kinds take special tokens (e.g. `<|endoftext|>`): each is one id, matched longest
first where two overlap, never merged with the text around it in BPE training, and
decoded back verbatim. `encode_iterable` encodes a stream of lines in bounded memory
with the ids of encoding the whole text (depthlab.tokstream says how).

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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from depthlab import bpe_train
from depthlab.atomic import atomic_write, atomic_write_text
from depthlab.bpe_corpus import (
    BLOCK_CHARS,
    CorpusEncoder,
    CutMismatch,
    fast_path_refusal,
    token_byte_lengths,
)
from depthlab.config import DataConfig
from depthlab.corpus import DOC_SEPARATOR, load_corpus
from depthlab.errors import UserError, read_json_object
from depthlab.tokstream import (
    CHUNK_CHARS,
    check_special_tokens,
    chunks,
    special_pattern,
    split_specials,
)

CACHE_VERSION = 1
TOKENIZER_FILE = "tokenizer.json"


class Tokenizer(Protocol):
    kind: str

    @property
    def vocab_size(self) -> int: ...
    @property
    def special_tokens(self) -> list[str]: ...
    def encode(self, text: str) -> list[int]: ...
    def encode_iterable(self, lines: Iterable[str],
                        chunk_chars: int = CHUNK_CHARS) -> Iterator[int]: ...
    def encode_arrays(self, lines: Iterable[str], dtype: Any,
                      chunk_chars: int = BLOCK_CHARS) -> Iterator[np.ndarray]: ...
    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str: ...
    def token_str(self, i: int) -> str: ...
    def save(self, path: Path) -> None: ...


class CharTokenizer:
    """One id per character, ids in sorted character order (nanoGPT's shakespeare_char),
    then one id per special token in the order given."""

    kind = "char"

    def __init__(self, chars: list[str], special_tokens: Sequence[str] = ()) -> None:
        self.chars = list(chars)
        self.index = {c: i for i, c in enumerate(self.chars)}
        self._specials = check_special_tokens(special_tokens)
        self._special_ids = {t: len(self.chars) + j for j, t in enumerate(self._specials)}
        self._pattern = special_pattern(self._specials)

    @classmethod
    def train(cls, text: str, special_tokens: Sequence[str] = ()) -> CharTokenizer:
        """The characters of `text` outside its special tokens, and the special tokens."""
        pattern = special_pattern(check_special_tokens(special_tokens))
        chars = set()
        for piece, special in split_specials(text, pattern):
            if not special:
                chars.update(piece)
        return cls(sorted(chars), special_tokens)

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + len(self._specials)

    @property
    def special_tokens(self) -> list[str]:
        return list(self._specials)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece, special in split_specials(text, self._pattern):
            if special:
                ids.append(self._special_ids[piece])
                continue
            try:
                ids.extend(self.index[c] for c in piece)
            except KeyError as e:
                raise UserError(
                    f"character {e.args[0]!r} is not in this char tokenizer's vocabulary"
                ) from None
        return ids

    def encode_iterable(self, lines: Iterable[str],
                        chunk_chars: int = CHUNK_CHARS) -> Iterator[int]:
        """The ids of encode("".join(lines)), one at a time, holding about one chunk of
        `chunk_chars` characters at once (e.g. over an open file, line by line)."""
        for chunk in chunks(lines, self._specials, False, chunk_chars):
            yield from self.encode(chunk)

    def encode_arrays(self, lines: Iterable[str], dtype: Any,
                      chunk_chars: int = BLOCK_CHARS) -> Iterator[np.ndarray]:
        """encode("".join(lines)) as arrays of `dtype` that join to it, a chunk of about
        `chunk_chars` characters at a time: a corpus streamed into token shards. Without
        special tokens each chunk is looked up in numpy (its code points against the
        sorted vocabulary), not character by character."""
        codes = np.array([ord(c) for c in self.chars], dtype=np.int64)
        order = np.argsort(codes)
        sorted_codes = codes[order]
        for chunk in chunks(lines, self._specials, False, chunk_chars):
            if self._pattern is not None:
                yield np.asarray(self.encode(chunk), dtype=dtype)
                continue
            points = np.frombuffer(chunk.encode("utf-32-le"), dtype="<u4").astype(np.int64)
            pos = np.minimum(np.searchsorted(sorted_codes, points), len(codes) - 1)
            bad = np.flatnonzero(sorted_codes[pos] != points)
            if len(bad):
                raise UserError(f"character {chr(points[bad[0]])!r} is not in this char "
                                "tokenizer's vocabulary")
            yield order[pos].astype(dtype)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        n = len(self.chars)
        return "".join(self.chars[i] if i < n else
                       "" if skip_special_tokens else self._specials[i - n] for i in ids)

    def token_str(self, i: int) -> str:
        n = len(self.chars)
        return self.chars[i] if i < n else self._specials[i - n]

    def save(self, path: Path) -> None:
        record: dict[str, Any] = {"kind": "char", "chars": self.chars}
        if self._specials:
            record["special_tokens"] = self._specials
        atomic_write_text(Path(path), json.dumps(record, ensure_ascii=False))


class BPETokenizer:
    """Byte-level BPE (GPT-2 style) trained with Hugging Face `tokenizers`: any text,
    Chinese included, round-trips exactly."""

    kind = "bpe"

    def __init__(self, hf_tokenizer) -> None:  # tokenizers.Tokenizer
        self.hf = hf_tokenizer
        self._token_bytes: np.ndarray | None = None  # encode_corpus's, computed once

    @classmethod
    def train(cls, text: str, vocab_size: int, special_tokens: Sequence[str] = (),
              what: str = "the text") -> BPETokenizer:
        """Merges learnt from the text between the special tokens (so no merge crosses or
        enters one), counted as encoding splits it (`training_texts`); the special tokens
        take the first ids and count in vocab_size. Refused up front when it may not fit
        in memory; trained in a child process that Ctrl-C or SIGTERM stops at once
        (depthlab.bpe_train). `what` names the text in those messages."""
        from tokenizers import Tokenizer as HFTokenizer  # only BPE runs load it

        specials = check_special_tokens(special_tokens)
        bpe_train.check_fits(text, vocab_size, what)
        trained = bpe_train.train_json(training_texts(text, specials), vocab_size, specials,
                                       what)
        return cls(HFTokenizer.from_str(trained))

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    @property
    def special_tokens(self) -> list[str]:
        return [t.content for _, t in sorted(self.hf.get_added_tokens_decoder().items())
                if t.special]

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text).ids

    def encode_batch(self, lines: list[str]) -> list[list[int]]:
        return [e.ids for e in self.hf.encode_batch(lines)]

    def encode_corpus(self, text: str, dtype: Any = np.uint32) -> np.ndarray:
        """encode(text) as an array, for a corpus: each distinct stretch between the places
        where encoding splits anyway is encoded once (depthlab.bpe_corpus says how and
        why). A tokenizer that cannot be cut exactly is encoded whole."""
        if _unstreamable(self.hf) is None and fast_path_refusal(self.hf) is None:
            prefix, suffix = self._stream_frame()
            try:
                if self._token_bytes is None:
                    self._token_bytes = token_byte_lengths(self.hf)
                body = CorpusEncoder(self.hf, self._token_bytes).encode(text, np.dtype(dtype))
            except CutMismatch:
                pass
            else:
                return np.concatenate([np.asarray(prefix, dtype), body,
                                       np.asarray(suffix, dtype)])
        return np.asarray(self.encode(text), dtype=dtype)

    def encode_iterable(self, lines: Iterable[str],
                        chunk_chars: int = CHUNK_CHARS) -> Iterator[int]:
        """The ids of encode("".join(lines)), one at a time, holding about one chunk of
        `chunk_chars` characters at once (e.g. over an open file, line by line). Refused
        (UserError) for a tokenizer whose text splitting depthlab cannot cut exactly: a
        normalizer, or a pre-tokenizer other than GPT-2's byte-level one."""
        prefix, suffix = self._stream_frame()
        added = [t.content for t in self.hf.get_added_tokens_decoder().values()]
        yield from prefix
        for chunk in chunks(lines, added, True, chunk_chars):
            yield from self.hf.encode(chunk, add_special_tokens=False).ids
        yield from suffix

    def encode_arrays(self, lines: Iterable[str], dtype: Any,
                      chunk_chars: int = BLOCK_CHARS) -> Iterator[np.ndarray]:
        """encode_corpus("".join(lines)) as arrays that join to it, holding about one chunk
        of `chunk_chars` characters at once: a corpus streamed into token shards. Chunks
        are cut where encoding splits anyway (depthlab.tokstream), then encoded the fast
        way (depthlab.bpe_corpus) or, for a tokenizer whose added tokens rule that out,
        with encode_batch over about `chunk_chars` characters of chunks. A tokenizer that
        cannot be cut exactly is refused (UserError), as encode_iterable refuses it."""
        dtype = np.dtype(dtype)
        prefix, suffix = self._stream_frame()
        yield np.asarray(prefix, dtype=dtype)
        added = [t.content for t in self.hf.get_added_tokens_decoder().values()]
        encoder = CorpusEncoder(self.hf) if fast_path_refusal(self.hf) is None else None
        batch: list[str] = []
        for chunk in chunks(lines, added, True, chunk_chars):
            if encoder is not None:
                try:
                    yield encoder.encode(chunk, dtype)
                    continue
                except CutMismatch:
                    encoder = None  # this tokenizer's tokens span cuts: encode as it is
            batch.append(chunk)
            if sum(map(len, batch)) >= chunk_chars:
                yield self._encode_batch(batch, dtype)
                batch = []
        if batch:
            yield self._encode_batch(batch, dtype)
        yield np.asarray(suffix, dtype=dtype)

    def _encode_batch(self, texts: list[str], dtype: np.dtype) -> np.ndarray:
        """The texts' ids end to end (`tokenizers` encodes them in parallel)."""
        encs = self.hf.encode_batch(texts, add_special_tokens=False)
        return np.concatenate([np.asarray(e.ids, dtype=dtype) for e in encs])

    def _stream_frame(self) -> tuple[list[int], list[int]]:
        """The ids the post-processor puts before and after the text (a BOS, say), after
        checking that chunked encoding is exact for this tokenizer."""
        why = _unstreamable(self.hf)
        if why:
            raise UserError(f"encode_iterable: this tokenizer {why}; encode the whole text "
                            "with encode instead")
        plain = self.hf.encode("a", add_special_tokens=False).ids
        full = self.hf.encode("a").ids
        for i in range(len(full) - len(plain) + 1):
            if full[i:i + len(plain)] == plain:
                return full[:i], full[i + len(plain):]
        raise UserError("encode_iterable: this tokenizer's post-processor rewrites the "
                        "text's ids; encode the whole text with encode instead")

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids`, special tokens included verbatim unless skipped."""
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_str(self, i: int) -> str:
        return self.hf.decode([i], skip_special_tokens=False)

    def save(self, path: Path) -> None:
        atomic_write(Path(path), lambda tmp: self.hf.save(str(tmp)))


def training_texts(text: str, specials: Sequence[str],
                   chunk_chars: int = CHUNK_CHARS) -> Iterator[str]:
    """The text between the special tokens as the BPE trainer should count it: the
    pre-tokens that encoding the whole text makes. Fed line by line, the trainer never saw
    a newline followed by indentation (encoding joins them: "\\n   " then " def"), so it
    could not learn them; fed whole, it would hold a copy of the corpus. Chunks of about
    `chunk_chars`, cut only where the pre-tokenizer splits anyway (depthlab.tokstream),
    give the counts of the whole text in memory of about one chunk."""
    for piece, special in split_specials(text, special_pattern(specials)):
        if not special:
            slices = (piece[i:i + chunk_chars] for i in range(0, len(piece), chunk_chars))
            yield from chunks(slices, (), True, chunk_chars)


def _unstreamable(hf: Any) -> str | None:
    """Why a `tokenizers.Tokenizer` cannot be encoded in chunks exactly (None: it can).
    Exact cuts (depthlab.tokstream) rest on GPT-2's byte-level split with no prefix space,
    optionally after splitting off digits (SmolLM2), and on no normalizer."""
    if hf.normalizer is not None:
        return f"normalizes text ({json.loads(hf.normalizer.__getstate__()).get('type')})"
    if getattr(hf.model, "dropout", None) not in (None, 0, 0.0):
        return "uses BPE dropout"
    pre = json.loads(hf.pre_tokenizer.__getstate__()) if hf.pre_tokenizer is not None else {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [s.get("type") for s in steps]
    byte_level = steps[-1] if steps else {}
    if (kinds[-1:] != ["ByteLevel"] or any(k != "Digits" for k in kinds[:-1])
            or byte_level.get("add_prefix_space") or not byte_level.get("use_regex", True)):
        return f"splits text with {json.dumps(pre)[:120]}"
    return None


def tokenizer_fingerprint(tok: Tokenizer) -> str:
    """sha256 of what a tokenizer maps (its characters or its BPE model, special tokens
    included), not of its file's formatting: the same tokens give the same fingerprint.
    Checkpoints and token shards both carry it."""
    if isinstance(tok, CharTokenizer):
        canon = json.dumps(["char", tok.chars, tok.special_tokens], ensure_ascii=False)
    else:
        canon = tok.hf.to_str()
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds every id: uint16 up to 65,536 ids."""
    return np.dtype(np.uint16 if vocab_size <= 65536 else np.uint32)


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
        specials = record.get("special_tokens", [])
        if not isinstance(specials, list):
            raise UserError(f"{path}: field special_tokens must be a list of strings, got "
                            f"{type(specials).__name__}")
        try:
            return CharTokenizer(chars, check_special_tokens(specials))
        except UserError as e:
            raise UserError(f"{path}: field {e}") from None
    from tokenizers import Tokenizer as HFTokenizer  # only BPE runs load it

    try:
        return BPETokenizer(HFTokenizer.from_file(str(path)))
    except Exception as e:  # tokenizers raises a bare Exception on bad files
        raise UserError(f"{path}: not a valid tokenizer file ({e})") from None


def run_special_tokens(data: DataConfig) -> list[str]:
    """The special tokens a run's tokenizer reserves: data.special_tokens, and the
    document separator when data.separate_documents puts it between the documents."""
    specials = list(data.special_tokens)
    if data.separate_documents and DOC_SEPARATOR not in specials:
        specials.append(DOC_SEPARATOR)
    return specials


def train_tokenizer(text: str, data: DataConfig) -> Tokenizer:
    specials = run_special_tokens(data)
    if data.tokenizer == "char":
        return CharTokenizer.train(text, specials)
    return BPETokenizer.train(text, data.bpe_vocab, specials, what=f"corpus {data.corpus!r}")


# --- the token cache -----------------------------------------------------------------

def cache_dir() -> Path:
    return Path(os.environ.get("DEPTHLAB_CACHE") or Path.home() / ".cache" / "depthlab")


@dataclass(frozen=True)
class TokenData:
    """A corpus encoded once: the tokenizer and the train/val ids (read-only memmaps, or
    a depthlab.shards.TokenStream over a shard folder: both take len() and slices)."""

    tokenizer: Tokenizer
    train: np.ndarray
    val: np.ndarray
    path: Path  # the cache entry, or the shard folder
    corpus: str  # the corpus spec
    corpus_sha256: str
    from_cache: bool  # False when this call trained and encoded
    from_shards: bool = False  # read from a folder of `depthlab data prepare`

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size


def cache_key(corpus_sha256: str, data: DataConfig) -> str:
    settings = {"v": CACHE_VERSION, "corpus": corpus_sha256, "tokenizer": data.tokenizer,
                "bpe_vocab": data.bpe_vocab if data.tokenizer == "bpe" else None,
                "val_fraction": data.val_fraction}
    if run_special_tokens(data):  # absent otherwise: the keys of earlier entries stay
        settings["special_tokens"] = run_special_tokens(data)
    if data.tokenizer == "bpe":  # merges counted over documents, not lines: other ids
        settings["bpe_counts"] = "documents"
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return f"{data.tokenizer}-{corpus_sha256[:12]}-{digest}"


def _encode_all(tok: Tokenizer, text: str) -> np.ndarray:
    """encode(text) as the cache stores it: the ids the model then reads at generation
    time too (once line by line, which split a newline from the indentation after it)."""
    dtype = token_dtype(tok.vocab_size)
    if isinstance(tok, BPETokenizer):
        return tok.encode_corpus(text, dtype)
    return np.asarray(tok.encode(text), dtype=dtype)


def prepare_data(data: DataConfig, root: Path | None = None) -> TokenData:
    """Load the corpus, train the tokenizer and encode, or reuse the cached result."""
    corpus = load_corpus(data.corpus, separate_documents=data.separate_documents)
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
