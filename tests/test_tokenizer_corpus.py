"""A corpus encoded fast (depthlab.bpe_corpus) gets exactly the ids of `encode`."""

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthlab import bpe_corpus
from depthlab.config import DataConfig
from depthlab.tokenizer import BPETokenizer, prepare_data
from depthlab.tokstream import SEGMENTS

DATA = Path(__file__).parent / "data"
ENGLISH = (DATA / "tiny_shakespeare.txt").read_text(encoding="utf-8")
CHINESE = (DATA / "tiny_hongloumeng.txt").read_text(encoding="utf-8")
SPECIALS = ["<|endoftext|>", "<|endoftext|><|endoftext|>", "<|文|>"]
# Pieces that stress GPT-2's split and the cuts: whitespace runs across line ends, Python's
# extra whitespace (\x1c, \x85), contractions, digits, Chinese, special tokens and parts.
PIECES = [" ", "  ", "\n", "\n\n", "\t", " \n", "\r\n", "\u3000", "\x1c", "\x85", "\xa0",
          "'s", "'", "s", "the", " cat", "12", "!", "?!", ",", ".", "x;", "é.", "1:", "。",
          "红楼", "é", "<|", "|>",
          "    return", "\n    ", *SPECIALS]
CODE = "".join(f"def f{i}(x):  \n    if x:\n        return {i}\n\n" for i in range(80))
FIXED = CODE + ENGLISH[:3000] + "a  \n  b\t\n\x1c x\x85 y" + CHINESE[:1000]


@pytest.fixture(scope="module")
def tokenizers():
    text = CODE + ENGLISH[:20000] + CHINESE + "".join(PIECES) * 20
    return {"plain": BPETokenizer.train(text, 500),
            "specials": BPETokenizer.train(text, 500, SPECIALS)}


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks, glued runs and the table small enough that a short text crosses them all."""
    monkeypatch.setattr(bpe_corpus, "BLOCK_CHARS", 37)
    monkeypatch.setattr(bpe_corpus, "GLUE_CHARS", 11)
    monkeypatch.setattr(bpe_corpus, "MAX_TABLE", 5)


@pytest.mark.parametrize("kind", ["plain", "specials"])
def test_corpus_ids_are_the_ids_of_encode(tokenizers, kind, small_blocks):
    tok = tokenizers[kind]
    text = FIXED + "".join(SPECIALS) + FIXED[:500]
    for t in (text, "", " ", "\n\n", "x", SPECIALS[0]):
        got = tok.encode_corpus(t)
        assert got.tolist() == tok.hf.encode(t).ids, repr(t[:40])
    assert tok.encode_corpus(text, np.uint16).dtype == np.uint16


texts = st.lists(st.sampled_from(PIECES), max_size=50).map("".join)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts)
def test_corpus_ids_equal_encode_on_any_mix(tokenizers, small_blocks, text):
    for tok in tokenizers.values():
        assert tok.encode_corpus(text).tolist() == tok.hf.encode(text).ids


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_segments_start_exactly_where_byte_level_text_may_be_cut(text):
    """Before a space or newline that follows a non-space character (depthlab.tokstream.
    chunks' rule), and between an ASCII letter and , . ; : ! ?: there and nowhere else."""
    segments = SEGMENTS.findall(text)
    assert "".join(segments) == text
    starts = set(np.cumsum([0, *map(len, segments)])[1:-1].tolist())
    assert starts == {p for p in range(1, len(text))
                      if (text[p] in " \n" and not text[p - 1].isspace())
                      or (text[p] in ",.;:!?" and text[p - 1].isascii() and text[p - 1].isalpha())}


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_the_vectorised_segments_are_the_regexs(text):
    """distinct_segments reads the cut rule off the code points and groups the segments by
    a hash: the same segments as SEGMENTS.findall, each distinct one once."""
    distinct, order = bpe_corpus.distinct_segments(text)
    assert [distinct[i] for i in order.tolist()] == SEGMENTS.findall(text)
    assert len(set(distinct)) == len(distinct)


def test_a_hash_collision_falls_back_to_the_regex(tokenizers, monkeypatch):
    """Every segment hashed alike: the check against each group's first segment fails and
    the block is split by the regex, so the ids stay those of encode."""
    monkeypatch.setattr(bpe_corpus, "segment_hashes", lambda codes, starts, ends:
                        np.zeros(len(starts), np.uint64))
    distinct, order = bpe_corpus.distinct_segments(FIXED)
    assert [distinct[i] for i in order.tolist()] == SEGMENTS.findall(FIXED)
    tok = tokenizers["plain"]
    assert tok.encode_corpus(FIXED).tolist() == tok.hf.encode(FIXED).ids


def test_whitespace_lies_in_the_basic_plane():
    """_classes scans U+0000..U+FFFF for the regex's \\s; nothing above it matches."""
    above = "".join(map(chr, range(0x10000, 0x110000)))
    assert re.search(r"\s", above) is None
    spaces = bpe_corpus._classes() & bpe_corpus.SPACE
    assert np.flatnonzero(spaces).tolist() == [c for c in range(0x10000) if chr(c).isspace()]


def test_a_tokenizer_the_fast_path_cannot_cut_is_encoded_whole(tokenizers):
    """An added token that strips the whitespace beside it moves a cut: encoded whole."""
    from tokenizers import AddedToken, Tokenizer

    hf = Tokenizer.from_str(tokenizers["plain"].hf.to_str())
    hf.add_special_tokens([AddedToken("<m>", lstrip=True, normalized=False)])
    tok = BPETokenizer(hf)
    assert "strips" in bpe_corpus.fast_path_refusal(hf)
    text = "a <m> b  <m>\n c"
    assert tok.encode_corpus(text).tolist() == hf.encode(text).ids


def test_the_cache_holds_the_ids_generation_reads(tmp_path):
    """The token cache once encoded BPE line by line, which splits a whitespace run at a
    line end ("a  \\n  b"); the model then met other ids at generation time, where
    `encode` reads the text whole. The cache now holds encode's ids."""
    corpus = tmp_path / "code.txt"
    corpus.write_text(FIXED, encoding="utf-8")
    data = prepare_data(DataConfig(corpus=str(corpus), tokenizer="bpe", bpe_vocab=400),
                        tmp_path / "cache")
    ids = np.concatenate([data.train, data.val]).tolist()
    assert ids == data.tokenizer.encode(FIXED)
    by_lines = [i for line in FIXED.splitlines(keepends=True)
                for i in data.tokenizer.encode(line)]
    assert by_lines != ids  # the split the cache used to make


def test_code_is_encoded_with_the_indentation_tokens_it_learnt(tokenizers):
    """Documents, not lines: the indentation after a newline is learnt and used."""
    tok = tokenizers["plain"]
    assert any(re.fullmatch(r"\n +", tok.token_str(i)) for i in tok.encode_corpus(CODE).tolist())
