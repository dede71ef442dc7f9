"""encode_iterable: the ids of encoding the whole text, however the text is cut into lines
and chunks, in memory that does not grow with the file."""

import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthlab.tokenizer import BPETokenizer, CharTokenizer
from depthlab.tokstream import chunks

DATA = Path(__file__).parent / "data"
ENGLISH = (DATA / "tiny_shakespeare.txt").read_text(encoding="utf-8")
CHINESE = (DATA / "tiny_hongloumeng.txt").read_text(encoding="utf-8")
SPECIALS = ["<|endoftext|>", "<|endoftext|><|endoftext|>", "<|文|>"]
# Pieces that stress GPT-2's split: runs of mixed whitespace, contractions, digits,
# punctuation glued to words, Chinese, and the special tokens and parts of them.
PIECES = [" ", "  ", "\n", "\n\n", "\t", " \n", "\r\n", "\u3000", "'s", "'", "s", "ll", "the",
          " cat", "12", "3", "!", "?!", "。", "，", "红楼", "梦", "é", "<|", "|>", "endoftext",
          *SPECIALS]
ALPHABET = ENGLISH + CHINESE + "".join(PIECES)


@pytest.fixture(scope="module")
def tokenizers():
    return {"char": CharTokenizer.train(ALPHABET, SPECIALS),
            "bpe": BPETokenizer.train(ENGLISH[:20000] + CHINESE + "".join(PIECES) * 20, 500,
                                      SPECIALS)}


texts = st.lists(st.sampled_from(PIECES), max_size=60).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts, cuts=st.lists(st.integers(0, 400), max_size=8), chunk=st.integers(1, 24))
def test_stream_equals_whole_however_cut(tokenizers, text, cuts, chunk):
    points = sorted({min(c, len(text)) for c in cuts})
    lines = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    for tok in tokenizers.values():
        assert list(tok.encode_iterable(lines, chunk_chars=chunk)) == tok.encode(text)


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_stream_of_a_corpus_file_equals_encoding_it_whole(tokenizers, kind, tmp_path):
    text = (ENGLISH[:6000] + SPECIALS[0] + CHINESE[:3000] + SPECIALS[1] + SPECIALS[2]) * 2
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    tok = tokenizers[kind]
    with open(path, encoding="utf-8", newline="") as f:
        ids = list(tok.encode_iterable(f, chunk_chars=500))
    assert ids == tok.encode(text) and tok.decode(ids) == text


def test_chunks_join_back_and_keep_special_tokens_whole():
    text = "a b<|endoftext|> c\n<|文|>\n d  e<|endoftext|><|endoftext|>\n" * 50
    inside = {a + k for t in SPECIALS for a in range(len(text)) if text.startswith(t, a)
              for k in range(1, len(t))}  # positions strictly inside a special token
    for chunk in (1, 7, 64):
        parts = list(chunks(text.splitlines(keepends=True), SPECIALS, True, chunk))
        assert "".join(parts) == text and len(parts) > 1
        cuts = [sum(map(len, parts[:i])) for i in range(1, len(parts))]
        assert not inside & set(cuts)
        for p in cuts:  # before a space or newline that follows a non-space character
            assert text[p] in " \n" and not text[p - 1].isspace()


def _streamed_peak(tok, path: Path) -> tuple[int, int, int]:
    """(peak traced bytes, token count, rolling hash of the ids) of streaming `path`."""
    count, digest = 0, 0
    tracemalloc.start()
    try:
        with open(path, encoding="utf-8") as f:
            for i in tok.encode_iterable(f, chunk_chars=512):
                count += 1
                digest = (digest * 1_000_003 + i) % (1 << 61)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, count, digest


def _digest(ids: list[int]) -> int:
    digest = 0
    for i in ids:
        digest = (digest * 1_000_003 + i) % (1 << 61)
    return digest


@pytest.mark.slow
def test_stream_memory_does_not_grow_with_the_file(tokenizers, tmp_path):
    """Files of 128 KiB and 384 KiB: the peak of what Python holds while streaming (about
    one chunk of text and its ids) stays under a cap below the smaller file's size, and is
    about the same for both; the smaller file's ids equal encoding it whole."""
    tok = tokenizers["bpe"]
    block = ENGLISH[:9000] + SPECIALS[0] + CHINESE[:2000] + "\n" + SPECIALS[1]
    cap = 96 << 10
    peaks = []
    for size in (128 << 10, 384 << 10):
        path = tmp_path / f"corpus-{size}.txt"
        text = block * (size // len(block.encode("utf-8")) + 1)
        path.write_text(text, encoding="utf-8")
        assert path.stat().st_size >= size > cap
        peak, count, digest = _streamed_peak(tok, path)
        peaks.append(peak)
        assert peak < cap, (size, peak)
        if size == 128 << 10:
            whole = tok.encode(text)
            assert (count, digest) == (len(whole), _digest(whole))
    assert peaks[1] < 1.25 * peaks[0], peaks  # 3x the file, not 3x the memory
