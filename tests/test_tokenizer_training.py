"""BPE training counts the text as encoding splits it: documents, not lines."""

import json
import re
from pathlib import Path

from depthlab.bpe_train import untrained_bpe
from depthlab.tokenizer import BPETokenizer, training_texts

DATA = Path(__file__).parent / "data"
ENGLISH = (DATA / "tiny_shakespeare.txt").read_text(encoding="utf-8")
CHINESE = (DATA / "tiny_hongloumeng.txt").read_text(encoding="utf-8")
# Indented code: GPT-2's split joins a newline to the indentation after it ("\n   " then
# " return"), but only when it sees the newline and the next line together.
CODE = "".join(f"def f{i}(x, y):\n    if x > {i}:\n        return x * y\n    return y - {i}\n\n"
               for i in range(200))


def _learnt(tok: BPETokenizer) -> list[str]:
    """The vocabulary entries made by merges, as text."""
    model = json.loads(tok.hf.to_str())["model"]
    return [tok.hf.decoder.decode([a + b]) for a, b in model["merges"]]


def _trained_on(texts, vocab_size: int) -> BPETokenizer:
    tok, trainer = untrained_bpe(vocab_size, [])
    tok.train_from_iterator(texts, trainer=trainer)
    return BPETokenizer(tok)


def test_bpe_learns_a_newline_followed_by_indentation():
    """Fed one line at a time (as before), the trainer never saw "\\n" and the spaces after
    it in one pre-token, so it learnt no such token and the code took more ids."""
    ours = BPETokenizer.train(CODE, 400)
    by_lines = _trained_on(CODE.splitlines(keepends=True), 400)
    indents = lambda tok: [t for t in _learnt(tok) if re.search(r"\n +", t)]
    assert indents(by_lines) == []
    assert len(indents(ours)) >= 2  # the 4- and 8-space indentation at least
    assert len(ours.encode(CODE)) < len(by_lines.encode(CODE))
    assert ours.decode(ours.encode(CODE)) == CODE


def test_training_counts_the_whole_text_however_it_is_chunked():
    """Chunks are cut only where the pre-tokenizer splits anyway: training on them gives
    the tokenizer of training on the text in one piece, byte for byte."""
    text = CODE[:4000] + ENGLISH[:6000] + "  \n\n   x\t\ty\n" + CHINESE[:2000]
    pieces = list(training_texts(text, [], chunk_chars=40))
    assert "".join(pieces) == text and len(pieces) > 100
    assert _trained_on(pieces, 500).hf.to_str() == _trained_on([text], 500).hf.to_str()


def test_training_texts_leave_out_the_special_tokens():
    eot = "<|endoftext|>"
    text = f"a b{eot}{eot}c  d{eot}"
    assert "".join(training_texts(text, [eot], chunk_chars=1)) == "a bc  d"


def test_the_same_corpus_gives_the_same_tokenizer_file(tmp_path):
    for name in ("a.json", "b.json"):
        BPETokenizer.train(CODE + ENGLISH[:5000], 400).save(tmp_path / name)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_a_cached_line_trained_bpe_is_not_reused_and_char_entries_stay():
    """The keys main gave before BPE counted documents: a BPE entry then held other merges
    and ids, so it is not read again; a char entry is unchanged, so it keeps its key."""
    from depthlab.config import DataConfig
    from depthlab.tokenizer import cache_key

    sha = "0" * 64
    assert cache_key(sha, DataConfig(tokenizer="bpe", bpe_vocab=400)) != \
        "bpe-000000000000-4e11893da709037d"
    assert cache_key(sha, DataConfig(tokenizer="char")) == "char-000000000000-3a1f4355b2b79be9"
