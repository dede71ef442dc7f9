"""Encoding a whole corpus with a byte-level BPE at speed, to the ids of `encode`.

`tokenizers` spends about a microsecond per character on any text (it keeps the
alignments of every byte, which a corpus never needs), ten times tiktoken's cost. A
corpus repeats itself: cut at places where encoding splits anyway
(depthlab.tokstream.SEGMENTS: before a space or newline after a non-space character,
between a letter and a comma or full stop), 4.8 M characters of Shakespeare are 1.08 M
segments of which 41 k differ (340 k characters). The segments are found in numpy, not
by the regex: the cut rule read off the code points, a hash per segment, each segment
checked against the first of its hash's group (`distinct_segments`), so a string is made
per distinct segment, not per segment (the regex, a million strings and their dict
look-ups were two thirds of the time). Each distinct segment is encoded once, many of
them glued into one text per call (a glue point is a space or newline after a non-space
character: such a cut too), and numpy lays the ids out in corpus order.
bench/tokenizer_encode.py measures it against tiktoken on the same vocabulary.
"""

from __future__ import annotations

import functools
import re
import string
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


def token_byte_lengths(hf: Any) -> np.ndarray:
    """Bytes per id of a byte-level vocabulary, which spells one character per byte: a
    token's bytes are its length (an added token, never inside glued text, counts 0 and
    fails CorpusEncoder's check). A tokenizer computes it once (BPETokenizer keeps it)."""
    vocab = hf.get_vocab(with_added_tokens=True)
    ids = np.fromiter(vocab.values(), np.int64, len(vocab))
    out = np.zeros(int(ids.max(initial=-1)) + 1, np.int64)
    out[ids] = np.fromiter(map(len, vocab), np.int64, len(vocab))
    out[list(hf.get_added_tokens_decoder())] = 0
    return out


class CutMismatch(Exception):
    """The glued segments' tokens do not end where the segments do."""


class CorpusEncoder:
    """Encodes text the way `hf.encode(text, add_special_tokens=False)` does, for a
    tokenizer whose text depthlab can cut exactly (tokenizer._unstreamable is None) and
    whose added tokens pass `fast_path_refusal`.

    The ids of every distinct segment seen so far sit end to end in one array (`flat`);
    `table` maps a segment to its entry, `starts` and `lens` say where its ids lie."""

    def __init__(self, hf: Any, token_bytes: np.ndarray | None = None) -> None:
        self.hf = hf
        self.added = {t.content: i for i, t in hf.get_added_tokens_decoder().items()}
        self.pattern = special_pattern(self.added)
        self.token_bytes = token_byte_lengths(hf) if token_bytes is None else token_bytes
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
        distinct: list[str] = []  # each piece's distinct segments, end to end
        orders: list[np.ndarray] = []  # each segment's index into `distinct`
        for piece, special in split_specials(text, self.pattern):
            if special:
                orders.append(np.array([len(distinct)], np.int64))
                distinct.append(piece)
            else:
                segs, inverse = distinct_segments(piece)
                orders.append(inverse + len(distinct))
                distinct.extend(segs)
        self._learn(sorted(set(distinct).difference(self.table)))
        entry = np.fromiter(map(self.table.__getitem__, distinct), dtype=np.int64,
                            count=len(distinct))
        order = entry[np.concatenate(orders)] if orders else np.empty(0, np.int64)
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


SPACE, BREAK, MARK, LETTER = 1, 2, 4, 8  # the classes of a code point `_classes` gives


@functools.cache
def _classes() -> np.ndarray:
    """Per code point, what SEGMENTS' cut rule asks of it (bits): the regex class \\s
    (SPACE), a space or newline (BREAK), one of , . ; : ! ? (MARK), an ASCII letter
    (LETTER). Built on first use, as the regex itself reads \\s; every code point it
    matches lies in the Basic Multilingual Plane (the highest is U+3000), so only that
    plane is scanned (tests/test_tokenizer_corpus.py checks the rest)."""
    table = np.zeros(0x110000, np.uint8)
    plane = "".join(map(chr, range(0x10000)))
    table[[m.start() for m in re.finditer(r"\s", plane)]] |= SPACE
    table[[ord(" "), ord("\n")]] |= BREAK
    table[[ord(c) for c in ",.;:!?"]] |= MARK
    table[[ord(c) for c in string.ascii_letters]] |= LETTER
    return table


_HASH_BASE = 0x9E3779B97F4A7C15  # odd, so invertible modulo 2^64
_powers: dict[int, np.ndarray] = {}


def _hash_powers(n: int, base: int) -> np.ndarray:
    """base^0 .. base^(n - 1) modulo 2^64 (uint64 arithmetic wraps), kept for reuse."""
    have = _powers.get(base)
    if have is None or len(have) < n:
        steps = np.full(max(n, 1 << 16), base, np.uint64)
        steps[0] = 1
        have = _powers[base] = np.cumprod(steps, dtype=np.uint64)
    return have[:n]


def segment_hashes(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A hash of each segment codes[starts[i]:ends[i]] that does not depend on where it
    lies: sum_j c_j B^(j - start) + length, modulo 2^64, from one prefix sum."""
    up = _hash_powers(len(codes) + 1, _HASH_BASE)
    down = _hash_powers(len(codes) + 1, pow(_HASH_BASE, -1, 1 << 64))
    with np.errstate(over="ignore"):
        prefix = np.concatenate([np.zeros(1, np.uint64),
                                 np.cumsum(codes.astype(np.uint64) * up[:-1], dtype=np.uint64)])
        return (prefix[ends] - prefix[starts]) * down[starts] + (ends - starts).astype(np.uint64)


def distinct_segments(text: str) -> tuple[list[str], np.ndarray]:
    """SEGMENTS.findall(text) as its distinct segments (in hash order) and, for each
    segment in order, its index among them, without a string per segment.

    The cuts are SEGMENTS' rule read off the code points at once: before a space or
    newline after a non-space character, before , . ; : ! ? after an ASCII letter. Each
    segment is hashed (a polynomial modulo 2^64 from prefix sums), equal hashes are
    grouped, and every segment is then compared code point by code point with the first
    of its group, so a hash collision can never merge two segments: on one, the block
    is split by the regex instead."""
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    if len(codes) == 0:
        return [], np.empty(0, np.int64)
    kind = _classes()[codes]
    prev, cur = kind[:-1], kind[1:]
    cut = (((cur & BREAK) > 0) & ((prev & SPACE) == 0)) | (((cur & MARK) > 0) & ((prev & LETTER) > 0))
    starts = np.concatenate([[0], np.flatnonzero(cut) + 1])
    ends = np.append(starts[1:], len(codes))
    lens = ends - starts
    hashes = segment_hashes(codes, starts, ends)
    by_hash = np.argsort(hashes)
    ordered = hashes[by_hash]
    starts_group = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    heads = np.flatnonzero(starts_group)
    inverse = np.empty(len(hashes), np.int64)
    inverse[by_hash] = np.cumsum(starts_group) - 1
    rep = by_hash[heads]  # one segment of each group, to which the others must be equal
    each = rep[inverse]
    same = np.array_equal(lens[each], lens) and np.array_equal(
        codes[np.repeat(starts[each] - starts, lens) + np.arange(len(codes))], codes)
    if not same:  # a collision: the regex and a dict
        segs = SEGMENTS.findall(text)
        index: dict[str, int] = {}
        inv = np.fromiter((index.setdefault(s, len(index)) for s in segs), np.int64, len(segs))
        return list(index), inv
    return [text[a:b] for a, b in zip(starts[rep].tolist(), ends[rep].tolist(), strict=True)], inverse


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
