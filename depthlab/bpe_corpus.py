"""Encoding a whole corpus with a byte-level BPE at speed, to the ids of `encode`.

`tokenizers` spends about a microsecond per character on any text (it keeps the
alignments of every byte, which a corpus never needs), ten times tiktoken's cost. A
corpus repeats itself: cut at places where encoding splits anyway
(depthlab.tokstream.SEGMENTS: before a space or newline after a non-space character,
between a letter and a comma or full stop), 4.8 M characters of Shakespeare are 1.08 M
segments of which 41 k differ (340 k characters). Each distinct segment is encoded once,
many of them glued into one text per call (a glue point is a space or newline after a
non-space character: such a cut too), and numpy lays the ids out in corpus order.
bench/tokenizer_encode.py measures it against tiktoken on the same vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from typing import Any

import numpy as np

from depthlab.tokstream import SEGMENTS, chunks, special_pattern, split_specials

BLOCK_CHARS = 1 << 20  # characters segmented at once: bounds the segment lists
GLUE_CHARS = 1 << 16  # characters of distinct segments per encoder call
MAX_TABLE = 1 << 20  # distinct segments remembered; past it the table starts afresh


def fast_path_refusal(hf: Any) -> str | None:
    """Why the added tokens rule out cutting the text here (None: they do not). Cuts skip
    the added tokens, matched as `split_specials` does, which is how `tokenizers` matches
    one without lstrip, rstrip or single_word, all matched in one pass (it matches those
    with `normalized` in a second pass); one holding whitespace could form across a glue
    point."""
    added = list(hf.get_added_tokens_decoder().values())
    if len({t.normalized for t in added}) > 1:
        return "some added tokens match the normalized text and some the raw text"
    for t in added:
        if t.lstrip or t.rstrip or t.single_word:
            return f"the added token {t.content!r} strips or needs word boundaries"
        if any(c.isspace() for c in t.content):
            return f"the added token {t.content!r} holds whitespace"
    return None


class CutMismatch(Exception):
    """The glued segments' tokens do not end where the segments do."""


class CorpusEncoder:
    """Encodes text the way `hf.encode(text, add_special_tokens=False)` does, for a
    tokenizer whose text depthlab can cut exactly (tokenizer._unstreamable is None) and
    whose added tokens pass `fast_path_refusal`.

    The ids of every distinct segment seen so far sit end to end in one array (`flat`);
    `table` maps a segment to its entry, `starts` and `lens` say where its ids lie."""

    def __init__(self, hf: Any) -> None:
        self.hf = hf
        self.added = {t.content: i for i, t in hf.get_added_tokens_decoder().items()}
        self.pattern = special_pattern(self.added)
        vocab = hf.get_vocab(with_added_tokens=True)
        # Byte-level tokens spell one character per byte: a token's bytes are its length
        # (an added token, never inside glued text, counts 0 and fails the check).
        self.token_bytes = np.zeros(max(vocab.values(), default=0) + 1, dtype=np.int64)
        for token, i in vocab.items():
            self.token_bytes[i] = 0 if token in self.added else len(token)
        self._forget()

    def _forget(self) -> None:
        self.table: dict[str, int] = {}
        self.flat = self.starts = self.lens = np.empty(0, np.int64)
        self._new: list[tuple[np.ndarray, np.ndarray]] = []  # (ids, lens) not yet in flat

    def encode(self, text: str, dtype: np.dtype) -> np.ndarray:
        """The ids of `text`, one block of about BLOCK_CHARS characters at a time."""
        slices = (text[i:i + BLOCK_CHARS] for i in range(0, len(text), BLOCK_CHARS))
        parts = [self._block(b, dtype) for b in chunks(slices, self.added, True, BLOCK_CHARS)]
        return np.concatenate(parts) if parts else np.empty(0, dtype)

    def _block(self, text: str, dtype: np.dtype) -> np.ndarray:
        """Segments of the block, the new distinct ones encoded, then every segment's ids
        in order, gathered from the table."""
        if len(self.table) > MAX_TABLE:
            self._forget()
        segments: list[str] = []
        for piece, special in split_specials(text, self.pattern):
            if special:
                segments.append(piece)
            else:
                segments.extend(SEGMENTS.findall(piece))
        self._learn(sorted(set(segments).difference(self.table)))
        order = np.fromiter(map(self.table.__getitem__, segments), dtype=np.int64,
                            count=len(segments))
        n = self.lens[order]
        out_starts = np.cumsum(n) - n
        gather = np.repeat(self.starts[order] - out_starts, n) + np.arange(int(n.sum()))
        return self.flat[gather].astype(dtype, copy=False)

    def _learn(self, new: list[str]) -> None:
        """Encode the new distinct segments into the table. One that starts with a space or
        newline and ends with a non-space character can be glued to another such: the glue
        point is a cut where encoding splits anyway. The others (a piece's first and last
        segments, those that start with a punctuation mark) are encoded alone, as are the
        added tokens."""
        specials = [s for s in new if s in self.added]
        if specials:
            self._add(specials, np.array([self.added[s] for s in specials], np.int64),
                      np.ones(len(specials), np.int64))
        gluable = [s for s in new if s[0] in " \n" and not s[-1].isspace()
                   and s not in self.added]
        alone = [s for s in new if not (s[0] in " \n" and not s[-1].isspace())
                 and s not in self.added]
        if alone:
            lists = [e.ids for e in self._encode_all(alone)]
            self._add(alone, np.fromiter(chain.from_iterable(lists), dtype=np.int64),
                      np.fromiter(map(len, lists), dtype=np.int64, count=len(lists)))
        groups = list(_groups(gluable))
        for group, enc in zip(groups, self._encode_all(["".join(g) for g in groups]),
                              strict=True):
            self._split(group, np.asarray(enc.ids, dtype=np.int64))
        if self._new:
            ids, lens = (np.concatenate(x) for x in zip(*self._new, strict=True))
            self.starts = np.concatenate([self.starts, len(self.flat) + np.cumsum(lens) - lens])
            self.lens = np.concatenate([self.lens, lens])
            self.flat = np.concatenate([self.flat, ids])
            self._new = []

    def _add(self, segments: list[str], ids: np.ndarray, lens: np.ndarray) -> None:
        """New entries, in the order the pending ids lie (flat grows by them in _learn)."""
        first = len(self.table)
        self.table.update(zip(segments, range(first, first + len(segments)), strict=True))
        self._new.append((ids, lens))

    def _encode_all(self, texts: list[str]) -> list[Any]:
        return self.hf.encode_batch_fast(texts, add_special_tokens=False) if texts else []

    def _split(self, group: list[str], ids: np.ndarray) -> None:
        """The ids of glued segments, cut where each segment's bytes end (no token spans
        a cut); checked, so a tokenizer breaking that rule is encoded whole instead."""
        ends = np.cumsum(self.token_bytes[ids])
        seg_ends = np.cumsum(np.fromiter(map(len, map(str.encode, group)), dtype=np.int64,
                                         count=len(group)))
        last = np.searchsorted(ends, seg_ends)
        if not (last[-1] == len(ids) - 1 and np.array_equal(ends[last], seg_ends)):
            raise CutMismatch("a token spans two glued segments")
        self._add(group, ids, np.diff(last, prepend=-1))


def _groups(segments: list[str]) -> Iterator[list[str]]:
    """The segments in runs of about GLUE_CHARS characters."""
    group: list[str] = []
    size = 0
    for s in segments:
        group.append(s)
        size += len(s)
        if size >= GLUE_CHARS:
            yield group
            group, size = [], 0
    if group:
        yield group
