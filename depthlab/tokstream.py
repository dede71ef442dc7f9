"""Special tokens in text, and cutting a stream of lines into chunks that encode exactly.

Encoding a large file a chunk at a time gives the ids of encoding it whole only if no
chunk boundary changes how the text is split. Two things split text before BPE sees it:
the special (added) tokens, matched leftmost-longest, and the pre-tokenizer. A cut is
therefore made only where

* no occurrence of an added token overlaps or touches it, and no match can change with
  text not read yet (the cut stays one longest token plus two characters from the end
  of what has been read), and
* for byte-level BPE, the pre-tokenizer (GPT-2's regex) would split anyway and in the
  same way on both sides: before a space or newline that follows a non-space character.
  The run of non-space text before it ends there whatever follows; the whitespace after
  it starts a fresh match, and GPT-2's regex has no look-behind.

Memory is then bounded by `chunk_chars` plus the longest stretch of text without such a
position (a stretch with no space or newline), whatever the size of the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

from depthlab.errors import UserError

CHUNK_CHARS = 1 << 16  # characters per chunk handed to the encoder
# Text between special tokens cut where byte-level BPE may be cut: the rule of `chunks`
# (before a space or newline that follows a non-space character, `\s` being str.isspace),
# and between an ASCII letter and one of , . ; : ! ? (GPT-2's letter run ends at the
# mark whatever follows, and the mark starts a fresh match, as after a cut by `chunks`).
# findall gives pieces that join back to the text and encode alone; the second rule
# makes " lord," and " lord." one distinct " lord" (and 44% fewer distinct characters in
# Shakespeare, depthlab.bpe_corpus).
SEGMENTS = re.compile(r"(?s:.)[^ \n,.;:!?]*(?:(?:(?<=\s)[ \n]|(?<![A-Za-z])[,.;:!?])[^ \n,.;:!?]*)*")


def check_special_tokens(tokens: Sequence[str], field: str = "special_tokens") -> list[str]:
    """The special tokens as a list, or a UserError naming what is wrong with them."""
    out = list(tokens)
    for t in out:
        if not isinstance(t, str) or not t:
            raise UserError(f"{field}: each special token must be a non-empty string, got {t!r}")
    if len(set(out)) != len(out):
        dup = next(t for t in out if out.count(t) > 1)
        raise UserError(f"{field}: the special token {dup!r} is given twice")
    return out


def special_pattern(tokens: Iterable[str]) -> re.Pattern[str] | None:
    """A regex matching the tokens leftmost-longest (the longest first among those that
    start at the same place), as Hugging Face `tokenizers` matches its added tokens."""
    alternatives = sorted(set(tokens), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, alternatives))) if alternatives else None


def split_specials(text: str, pattern: re.Pattern[str] | None) -> Iterator[tuple[str, bool]]:
    """(piece, is_special) in order; the pieces join back to `text`, empty ones left out."""
    pos = 0
    if pattern is not None:
        for m in pattern.finditer(text):
            if m.start() > pos:
                yield text[pos:m.start()], False
            yield m.group(), True
            pos = m.end()
    if pos < len(text):
        yield text[pos:], False


def chunks(lines: Iterable[str], specials: Iterable[str], at_whitespace: bool,
           chunk_chars: int = CHUNK_CHARS) -> Iterator[str]:
    """The text of `lines` in chunks that join back to it, cut only where encoding the
    chunks one by one equals encoding the whole (see the module docstring): at the last
    safe place within `chunk_chars`, or the first one after it.

    at_whitespace: cut only before a space or newline that follows a non-space character
    (byte-level BPE); otherwise anywhere outside the special tokens (one id per character).
    """
    specials = sorted({t for t in specials if t}, key=len, reverse=True)
    longest = max(map(len, specials), default=0)
    near = re.compile("(?=(" + "|".join(map(re.escape, specials)) + "))") if specials else None
    margin = longest + 2  # a cut this far from the end no longer depends on what follows

    def safe(buf: str, p: int) -> bool:
        if at_whitespace and (buf[p] not in " \n" or buf[p - 1].isspace()):
            return False
        return near is None or not _touches_special(buf, p, near, longest)

    parts: list[str] = []
    size, want, scanned = 0, chunk_chars + margin, 0  # positions <= scanned: known unsafe
    for line in lines:
        if not isinstance(line, str):
            raise UserError(f"encode_iterable: expected lines of text (str), got "
                            f"{type(line).__name__}")
        parts.append(line)
        size += len(line)
        if size < want:
            continue
        buf, start = "".join(parts), 0
        while len(buf) - start >= chunk_chars + margin:
            limit = len(buf) - margin
            lo = max(start, scanned)
            cut = next((p for p in range(min(start + chunk_chars, limit), lo, -1)
                        if safe(buf, p)), None)
            if cut is None:
                lo = max(start + chunk_chars, scanned)
                cut = next((p for p in range(lo + 1, limit + 1) if safe(buf, p)), None)
            if cut is None:  # no safe place yet: read on, and look only at new text then
                scanned = limit
                break
            yield buf[start:cut]
            start = scanned = cut
        parts, size, scanned = [buf[start:]], len(buf) - start, scanned - start
        want = size + chunk_chars if size >= chunk_chars + margin else chunk_chars + margin
    tail = "".join(parts)
    if tail:
        yield tail


def _touches_special(buf: str, p: int, near: re.Pattern[str], longest: int) -> bool:
    """Whether an occurrence [a, b) of an added token has a <= p + 1 and b >= p - 1.
    Occurrences are all of them, overlapping or not, so the answer does not depend on
    which ones a leftmost-longest scan would pick (nor on lstrip/rstrip/single_word)."""
    for m in near.finditer(buf, max(p - longest - 1, 0), min(p + longest + 2, len(buf))):
        a, b = m.start(), m.start() + len(m.group(1))
        if a > p + 1:
            break
        if b >= p - 1:
            return True
    return False
