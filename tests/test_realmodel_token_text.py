"""Token ids shown as text (depthlab.probes.token_text), with known answers: a character
whose three UTF-8 bytes a byte-level BPE splits over two tokens is shown once, merged,
with each token's part kept; a lone fragment is its bytes, never '�'; ASCII around it
stays as it is; special tokens stand alone. The same holds for SentencePiece-style byte
tokens and for the project's character tokenizer, and any text reads back whole."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthlab.probes.token_text import (
    Piece,
    bare_ids,
    bytes_text,
    pieces,
    position_labels,
    token_bytes,
    token_text,
)
from depthlab.tokenizer import BPETokenizer, CharTokenizer

GOOD = "好"  # E5 A5 BD
SPECIAL = "<|im_start|>"


@pytest.fixture(scope="module")
def byte_bpe() -> BPETokenizer:
    """A byte-level BPE like GPT-2's and SmolLM2's: the 256 byte characters, one merge that
    makes the first two bytes of 好 one token ('å¥' = E5 A5), and a special token."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    vocab["å¥"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("å", "¥")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(SPECIAL, special=True, normalized=False)])
    return BPETokenizer(tok)


def _id(tok: BPETokenizer, piece: str) -> int:
    return tok.hf.token_to_id(piece)


def test_a_three_byte_character_over_two_tokens_is_one_piece(byte_bpe):
    ids = byte_bpe.encode(GOOD)
    assert ids == [_id(byte_bpe, "å¥"), _id(byte_bpe, "½")]  # E5 A5 | BD
    assert byte_bpe.token_str(ids[0]) == "�"  # what decoding one token alone shows
    assert pieces(byte_bpe, ids) == [Piece(GOOD, 0, 2, ("<0xE5><0xA5>", "<0xBD>"))]
    assert position_labels(byte_bpe, ids) == ["好 [<0xE5><0xA5>]", "好 [<0xBD>]"]


def test_a_lone_fragment_is_shown_as_its_bytes(byte_bpe):
    head, tail = _id(byte_bpe, "å¥"), _id(byte_bpe, "½")
    assert token_text(byte_bpe, head) == "<0xE5><0xA5>"
    assert token_text(byte_bpe, tail) == "<0xBD>"
    assert token_bytes(byte_bpe, head) == b"\xe5\xa5"
    # the head without its tail, then ASCII: the bytes never complete a character
    a = _id(byte_bpe, "a")
    assert pieces(byte_bpe, [head, a]) == [Piece("<0xE5><0xA5>", 0, 1, ("<0xE5><0xA5>",)),
                                           Piece("a", 1, 2, ("a",))]
    # the tail before its head (wrong order): each a stray byte run of its own
    assert [p.text for p in pieces(byte_bpe, [tail, head])] == ["<0xBD>", "<0xE5><0xA5>"]


def test_mixed_ascii_and_a_split_character(byte_bpe):
    text = "Hi 好, ok"
    ids = byte_bpe.encode(text)
    got = pieces(byte_bpe, ids)
    assert "".join(p.text for p in got) == text
    merged = [p for p in got if p.stop - p.start > 1]
    assert len(merged) == 1 and merged[0].text == GOOD
    assert merged[0].parts == ("<0xE5><0xA5>", "<0xBD>")
    assert all(p.stop - p.start == 1 for p in got if p is not merged[0])
    assert [p.text for p in got if p is not merged[0]] == ["H", "i", " ", ",", " ", "o", "k"]


def test_a_special_token_stands_alone_and_cuts_a_byte_run(byte_bpe):
    head, tail, special = _id(byte_bpe, "å¥"), _id(byte_bpe, "½"), _id(byte_bpe, SPECIAL)
    got = pieces(byte_bpe, [head, special, tail])
    assert got == [Piece("<0xE5><0xA5>", 0, 1, ("<0xE5><0xA5>",)),
                   Piece(SPECIAL, 1, 2, (SPECIAL,)),
                   Piece("<0xBD>", 2, 3, ("<0xBD>",))]
    assert token_bytes(byte_bpe, special) is None


def test_sentencepiece_byte_tokens_merge_the_same_way():
    from tokenizers import Tokenizer, decoders, models

    vocab = {"<0xE5>": 0, "<0xA5>": 1, "<0xBD>": 2, "a": 3, "<unk>": 4}
    hf = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True, unk_token="<unk>"))
    hf.decoder = decoders.ByteFallback()
    tok = BPETokenizer(hf)
    ids = tok.encode("a好")
    assert ids == [3, 0, 1, 2]
    assert pieces(tok, ids) == [Piece("a", 0, 1, ("a",)),
                                Piece(GOOD, 1, 4, ("<0xE5>", "<0xA5>", "<0xBD>"))]
    assert token_text(tok, 0) == "<0xE5>"


def test_the_character_tokenizer_is_one_piece_per_token():
    tok = CharTokenizer(sorted("红楼梦 ab"))
    ids = tok.encode("红楼 a梦")
    assert [(p.text, p.start, p.stop) for p in pieces(tok, ids)] == [
        ("红", 0, 1), ("楼", 1, 2), (" ", 2, 3), ("a", 3, 4), ("梦", 4, 5)]
    assert bare_ids(tok, "梦a") == tok.encode("梦a")


def test_bytes_text_writes_every_stray_byte():
    assert bytes_text("好".encode()) == "好"
    assert bytes_text(b"\xe5\xa5") == "<0xE5><0xA5>"
    assert bytes_text(b"a\xbd b") == "a<0xBD> b"
    assert bytes_text(b"\xff\xfe") == "<0xFF><0xFE>"


@pytest.fixture(scope="module")
def course_bpe() -> BPETokenizer:
    """A course-style byte-level BPE with a small vocabulary: most CJK and emoji split."""
    return BPETokenizer.train("The capital of France is Paris. 残差连接把每一层的输出加回。" * 20, 300)


@settings(max_examples=150, deadline=None)
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1,
                    max_size=40))
def test_any_text_reads_back_whole_and_every_position_is_in_one_piece(course_bpe, text):
    ids = course_bpe.encode(text)
    got = pieces(course_bpe, ids)
    assert "".join(p.text for p in got) == text  # whole characters: nothing shown as bytes
    assert [p.start for p in got] == [0, *[p.stop for p in got[:-1]]] and got[-1].stop == len(ids)
    assert all(len(p.parts) == p.stop - p.start for p in got)
    assert len(position_labels(course_bpe, ids)) == len(ids)


@settings(max_examples=100, deadline=None)
@given(ids=st.lists(st.integers(0, 299), min_size=1, max_size=30))
def test_any_id_sequence_shows_no_replacement_character(course_bpe, ids):
    ids = [i for i in ids if i < course_bpe.vocab_size] or [0]
    got = pieces(course_bpe, ids)
    assert not any("�" in p.text or any("�" in q for q in p.parts) for p in got)
    # the bytes shown are the bytes the ids stand for
    raw = b"".join(token_bytes(course_bpe, i) for i in ids)
    assert "".join(p.text for p in got) == bytes_text(raw)


def test_an_id_past_a_char_tokenizers_vocabulary_is_named_by_its_id():
    # A model's vocabulary may be larger than its run's char tokenizer (the lens grid's
    # top-5 can name any of the model's ids): such an id is shown as <id N>, its neighbours
    # as their characters.
    tok = CharTokenizer.train("ab")
    assert tok.vocab_size == 2
    assert token_text(tok, 1) == "b"
    assert token_text(tok, 7) == "<id 7>"
    assert [p.text for p in pieces(tok, [0, 7, 1])] == ["a", "<id 7>", "b"]
