"""Token shards on disk: a corpus encoded once, read by offset, so training never holds it.

A shard folder (written by `depthlab data prepare`, depthlab.shard_prepare) holds
tokenizer.json, NAME_00000.bin, NAME_00001.bin, ... and manifest.json. Each shard is a
HEADER_BYTES header (MAGIC, then one JSON object padded with spaces: version, the
tokenizer's fingerprint, dtype, token count) followed by the ids, little-endian. The
shards are one token stream cut in pieces; the manifest lists them in order and states
the validation part: the stream's last max(1, floor(n * val_fraction)) tokens, the split
the token cache makes (depthlab.tokenizer), so a folder prepared from a corpus trains on
exactly the windows a run on that corpus reads. Everything is checked on opening, and a
folder that does not hold what its manifest says is refused in one line naming the file.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from depthlab.atomic import FILE_MODE
from depthlab.errors import UserError, read_json_object
from depthlab.outdir import SHARD_MANIFEST
from depthlab.tokenizer import TOKENIZER_FILE, TokenData, load_tokenizer, tokenizer_fingerprint

MAGIC = b"DLTOKSHD"
VERSION = 1
HEADER_BYTES = 1024  # a multiple of 8: the ids after it stay aligned for uint32 reads
MANIFEST_FILE = SHARD_MANIFEST
FORMAT = "depthlab-token-shards"
DTYPES = ("uint16", "uint32")
PREPARE_HINT = "make the folder again with `depthlab data prepare`"


def shard_name(name: str, index: int) -> str:
    return f"{name}_{index:05d}.bin"


def encode_header(tokenizer_sha256: str, dtype: str, tokens: int) -> bytes:
    body = json.dumps({"version": VERSION, "tokenizer_sha256": tokenizer_sha256,
                       "dtype": dtype, "tokens": tokens}).encode("ascii")
    room = HEADER_BYTES - len(MAGIC) - 1
    if len(body) > room:  # pragma: no cover - a fixed-size record
        raise ValueError("shard header too long")
    return MAGIC + body.ljust(room) + b"\n"


def read_header(path: Path) -> dict[str, Any]:
    """The header of one shard, checked: its magic, version, fields and that the file
    holds exactly the tokens it announces (a truncated copy is refused)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
        size = path.stat().st_size
    except FileNotFoundError:
        raise UserError(f"{path}: missing, though {MANIFEST_FILE} lists it; "
                        f"{PREPARE_HINT}") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    if not raw.startswith(MAGIC) or len(raw) < HEADER_BYTES:
        raise UserError(f"{path}: not a depthlab token shard (it does not start with "
                        f"{MAGIC.decode()} and a {HEADER_BYTES}-byte header); {PREPARE_HINT}")
    try:
        head = json.loads(raw[len(MAGIC):].decode("ascii"))
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("version") != VERSION:
        got = head.get("version") if isinstance(head, dict) else "an unreadable header"
        raise UserError(f"{path}: token shard version {got}, this depthlab reads version "
                        f"{VERSION}; {PREPARE_HINT}")
    dtype, tokens = head.get("dtype"), head.get("tokens")
    if dtype not in DTYPES or not isinstance(tokens, int) or isinstance(tokens, bool) \
            or tokens < 0 or not isinstance(head.get("tokenizer_sha256"), str):
        raise UserError(f"{path}: header field dtype must be one of {', '.join(DTYPES)}, "
                        f"tokens a whole number and tokenizer_sha256 a string; got "
                        f"{json.dumps(head)[:120]}")
    want = HEADER_BYTES + tokens * np.dtype(dtype).itemsize
    if size != want:
        have = (size - HEADER_BYTES) // np.dtype(dtype).itemsize
        what = "truncated" if size < want else "longer than its header says"
        raise UserError(f"{path}: {what}: {size:,} bytes, the header announces {tokens:,} "
                        f"{dtype} tokens ({want:,} bytes; the file holds {max(have, 0):,}); "
                        f"{PREPARE_HINT}")
    return head


class ShardWriter:
    """Appends ids to NAME_00000.bin, NAME_00001.bin, ... of `shard_tokens` tokens each.
    A shard is written under a temporary name (`.NAME_00000.bin.xxxxxxxx.tmp`, as
    depthlab.atomic names them), its header filled in, synced and renamed only when
    complete, so a stop at any moment leaves no shard that claims more than it holds."""

    def __init__(self, folder: Path, name: str, dtype: np.dtype, tokenizer_sha256: str,
                 shard_tokens: int) -> None:
        self.folder, self.name, self.dtype = Path(folder), name, np.dtype(dtype)
        self.sha, self.shard_tokens = tokenizer_sha256, shard_tokens
        self.done: list[dict[str, Any]] = []  # {"file", "tokens"} of each finished shard
        self._file: Any = None
        self._tmp: str | None = None
        self._count = 0

    @property
    def tokens(self) -> int:
        return sum(s["tokens"] for s in self.done) + self._count

    def add(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=self.dtype.newbyteorder("<"))
        while len(ids):
            if self._file is None:
                self._open()
            take = min(len(ids), self.shard_tokens - self._count)
            self._file.write(ids[:take].tobytes())
            self._count += take
            ids = ids[take:]
            if self._count == self.shard_tokens:
                self._finish()

    def close(self) -> list[dict[str, Any]]:
        """Finish the last shard; the list of shards in order."""
        if self._file is not None:
            self._finish()
        return self.done

    def abort(self) -> None:
        """Drop the shard being written (its temporary file)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tmp is not None:
            Path(self._tmp).unlink(missing_ok=True)
            self._tmp = None

    def _open(self) -> None:
        final = shard_name(self.name, len(self.done))
        fd, self._tmp = tempfile.mkstemp(prefix=f".{final}.", suffix=".tmp", dir=self.folder)
        self._file = os.fdopen(fd, "wb")
        self._file.write(encode_header(self.sha, self.dtype.name, 0))
        self._count = 0

    def _finish(self) -> None:
        f, tmp = self._file, self._tmp
        final = shard_name(self.name, len(self.done))
        f.seek(0)
        f.write(encode_header(self.sha, self.dtype.name, self._count))
        f.flush()
        os.fsync(f.fileno())
        f.close()
        self._file = None
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, self.folder / final)
        self._tmp = None
        self.done.append({"file": final, "tokens": self._count})
        self._count = 0


class TokenStream:
    """Tokens [start, stop) of the stream the shards make, read by offset through
    numpy.memmap: a slice gathers only the pages it covers, across shard ends when it
    straddles one. It answers len() and slicing as the cache's memmap does, which is all
    depthlab.train.batches reads; np.asarray() reads it whole (small folders only)."""

    def __init__(self, maps: list[np.ndarray], start: int, stop: int) -> None:
        self.maps, self.start, self.stop = maps, start, stop
        self.ends = np.cumsum([len(m) for m in maps])  # stream offset where each shard ends
        self.dtype = maps[0].dtype if maps else np.dtype(np.uint16)

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, key: slice | int) -> Any:
        if isinstance(key, slice):
            a, b, step = key.indices(len(self))
            if step != 1:
                raise IndexError("TokenStream: slices with a step are not supported")
            return self._read(self.start + a, self.start + max(a, b))
        i = int(key) + (len(self) if int(key) < 0 else 0)
        if not 0 <= i < len(self):
            raise IndexError(f"token {key} is outside 0..{len(self) - 1}")
        return self._read(self.start + i, self.start + i + 1)[0]

    def _read(self, a: int, b: int) -> np.ndarray:
        parts, k = [], int(np.searchsorted(self.ends, a, side="right"))
        while a < b:
            first = int(self.ends[k - 1]) if k else 0
            take = min(b, int(self.ends[k])) - a
            parts.append(np.asarray(self.maps[k][a - first:a - first + take]))
            a += take
            k += 1
        if not parts:
            return np.empty(0, self.dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._read(self.start, self.stop)
        return out if dtype is None else out.astype(dtype)

    def __iter__(self):  # noqa: ANN204 - an iterator over numpy scalars
        return iter(np.asarray(self))


def _field(manifest: dict, key: str, kind: type | tuple[type, ...], where: Path) -> Any:
    value = manifest.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise UserError(f"{where}: field {key} is {json.dumps(value)[:60]}, not what "
                        f"`depthlab data prepare` writes; {PREPARE_HINT}")
    return value


def open_shards(folder: str | Path, field: str = "data.shards") -> TokenData:
    """The train and validation tokens of a shard folder, with its tokenizer, after
    checking that every file is what the manifest says: present, whole, encoded with the
    folder's tokenizer (its fingerprint in each header) and in the manifest's dtype."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise UserError(f"{field}={str(folder)!r}: no such folder; {PREPARE_HINT} "
                        "--corpus TEXT --tokenizer TOKENIZER --out FOLDER")
    where = folder / MANIFEST_FILE
    manifest = read_json_object(where, "missing: this is not a token shard folder, or its "
                                f"preparation did not finish; {PREPARE_HINT}")
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise UserError(f"{where}: not a depthlab token shard manifest of version {VERSION} "
                        f"(format {manifest.get('format')!r}, version "
                        f"{manifest.get('version')!r}); {PREPARE_HINT}")
    sha = _field(manifest, "tokenizer_sha256", str, where)
    dtype = _field(manifest, "dtype", str, where)
    shards = _field(manifest, "shards", list, where)
    corpus = _field(manifest, "corpus", dict, where)
    val = _field(manifest, "val", dict, where)
    tok = load_tokenizer(folder / TOKENIZER_FILE)
    if tokenizer_fingerprint(tok) != sha:
        raise UserError(f"{folder / TOKENIZER_FILE}: maps other tokens than the ones the "
                        f"shards were encoded with ({MANIFEST_FILE} says tokenizer "
                        f"{sha[:12]}...); {PREPARE_HINT}")
    maps = []
    for entry in shards:
        name = entry.get("file") if isinstance(entry, dict) else None
        if not isinstance(name, str) or Path(name).name != name or not name.endswith(".bin"):
            raise UserError(f"{where}: field shards lists {json.dumps(entry)[:60]}, not a "
                            f"shard file name; {PREPARE_HINT}")
        path = folder / name
        head = read_header(path)
        if head["tokenizer_sha256"] != sha:
            raise UserError(f"{path}: encoded with tokenizer {head['tokenizer_sha256'][:12]}..., "
                            f"the folder's is {sha[:12]}... ({MANIFEST_FILE}); {PREPARE_HINT}")
        if head["dtype"] != dtype or head["tokens"] != entry.get("tokens"):
            raise UserError(f"{path}: holds {head['tokens']:,} {head['dtype']} tokens, "
                            f"{MANIFEST_FILE} says {entry.get('tokens')} {dtype}; {PREPARE_HINT}")
        if head["tokens"]:
            maps.append(np.memmap(path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r",
                                  offset=HEADER_BYTES, shape=(head["tokens"],)))
    total = sum(len(m) for m in maps)
    split = val.get("start")
    if not isinstance(split, int) or isinstance(split, bool) or not 0 <= split <= total:
        raise UserError(f"{where}: field val.start is {json.dumps(split)}, not a position in "
                        f"the {total:,} tokens of the shards; {PREPARE_HINT}")
    text_sha, spec = corpus.get("sha256"), corpus.get("spec")
    if not (isinstance(text_sha, str) and re.fullmatch(r"[0-9a-f]{64}", text_sha)):
        raise UserError(f"{where}: field corpus.sha256 is {json.dumps(text_sha)[:60]}, not "
                        f"the text's sha256 (64 hex digits) that runs record; {PREPARE_HINT}")
    return TokenData(tok, TokenStream(maps, 0, split), TokenStream(maps, split, total), folder,
                     spec if isinstance(spec, str) else str(folder), text_sha, True,
                     from_shards=True)


@dataclass(frozen=True)
class Manifest:
    """What manifest.json records, written last: a folder without it is not one."""

    tokenizer_sha256: str
    vocab_size: int
    dtype: str
    corpus: dict[str, Any]
    shards: list[dict[str, Any]]
    val_fraction: float

    def to_json(self) -> str:
        total = sum(s["tokens"] for s in self.shards)
        n_val = max(1, int(total * self.val_fraction))  # the token cache's split
        return json.dumps({
            "format": FORMAT, "version": VERSION, "tokenizer_sha256": self.tokenizer_sha256,
            "tokenizer_file": TOKENIZER_FILE, "vocab_size": self.vocab_size,
            "dtype": self.dtype, "tokens": total, "corpus": self.corpus,
            "val": {"fraction": self.val_fraction, "start": max(total - n_val, 0),
                    "tokens": min(n_val, total)},
            "shards": self.shards}, indent=1, ensure_ascii=False)
