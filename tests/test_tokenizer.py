"""Tokenizers round-trip exactly, and a corpus is encoded once and split the same way every time."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from depthlab.config import DataConfig
from depthlab.errors import UserError
from depthlab.tokenizer import BPETokenizer, CharTokenizer, load_tokenizer, prepare_data

DATA = Path(__file__).parent / "data"
ENGLISH = (DATA / "tiny_shakespeare.txt").read_text(encoding="utf-8")
CHINESE = (DATA / "tiny_hongloumeng.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("text", [ENGLISH, CHINESE], ids=["english", "chinese"])
def test_char_round_trip(text, tmp_path):
    tok = CharTokenizer.train(text)
    assert tok.decode(tok.encode(text)) == text
    tok.save(tmp_path / "tokenizer.json")
    again = load_tokenizer(tmp_path / "tokenizer.json")
    assert again.kind == "char" and again.encode(text[:200]) == tok.encode(text[:200])
    assert tok.chars == sorted(tok.chars)  # nanoGPT's convention: ids in character order


@pytest.mark.parametrize("text", [ENGLISH, CHINESE], ids=["english", "chinese"])
def test_bpe_round_trip(text, tmp_path):
    tok = BPETokenizer.train(text, vocab_size=400)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode("utf-8"))  # merges happened
    unseen = "今天天气真好 — naïve café"
    assert tok.decode(tok.encode(unseen)) == unseen  # byte-level: nothing is unknown
    tok.save(tmp_path / "tokenizer.json")
    assert load_tokenizer(tmp_path / "tokenizer.json").encode(unseen) == tok.encode(unseen)


def test_char_unknown_character_is_a_user_error():
    with pytest.raises(UserError, match="'Z'"):
        CharTokenizer.train("abc").encode("aZ")


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_encoded_once_then_cached(tmp_path, kind):
    cfg = DataConfig(corpus=str(DATA / "tiny_hongloumeng.txt"), tokenizer=kind, bpe_vocab=400)
    first = prepare_data(cfg, tmp_path)
    assert not first.from_cache
    stamp = (first.path / "train.bin").stat().st_mtime_ns
    second = prepare_data(cfg, tmp_path)
    assert second.from_cache and second.path == first.path
    assert (second.path / "train.bin").stat().st_mtime_ns == stamp
    ids = np.concatenate([second.train, second.val]).tolist()
    assert second.tokenizer.decode(ids) == CHINESE  # Chinese round-trips through the cache
    assert second.train.dtype == np.uint16


def test_split_is_fixed_and_keyed_by_settings(tmp_path):
    cfg = DataConfig(corpus=str(DATA / "tiny_shakespeare.txt"), tokenizer="char", val_fraction=0.1)
    a = prepare_data(cfg, tmp_path / "a")
    b = prepare_data(cfg, tmp_path / "b")
    assert np.array_equal(a.train, b.train) and np.array_equal(a.val, b.val)
    assert len(a.val) == int((len(a.train) + len(a.val)) * 0.1)
    other = prepare_data(replace(cfg, val_fraction=0.2), tmp_path / "a")
    assert other.path != a.path and len(other.val) > len(a.val)
