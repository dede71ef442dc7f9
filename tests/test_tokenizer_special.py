"""Special tokens: one id each, longest first where two overlap, never part of a BPE merge,
decoded back verbatim, saved with the tokenizer; the same ids as Hugging Face `tokenizers`
built from the same merges; documents of a corpus separated by <|endoftext|> on request."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from depthlab.config import Config, DataConfig, apply_overrides
from depthlab.corpus import DOC_SEPARATOR, load_corpus
from depthlab.errors import ConfigError, UserError
from depthlab.tokenizer import BPETokenizer, CharTokenizer, load_tokenizer, prepare_data

DATA = Path(__file__).parent / "data"
ENGLISH = (DATA / "tiny_shakespeare.txt").read_text(encoding="utf-8")[:20000]
CHINESE = (DATA / "tiny_hongloumeng.txt").read_text(encoding="utf-8")[:8000]
EOT, DOUBLE, DOC = "<|endoftext|>", "<|endoftext|><|endoftext|>", "<|文档|>"
SPECIALS = [EOT, DOUBLE, DOC]
TEXTS = [
    f"Hi{EOT}there{EOT}",                          # between words, at the end
    f"{EOT}{EOT}{EOT}x",                           # adjacent: the pair first, then one
    f"{DOC}{EOT}{DOC}",                            # different specials adjacent
    f"贾宝玉{EOT}林黛玉{DOC}薛宝钗。\n",              # inside Chinese text
    f"<|endof{EOT}text|> <|endoftext| {EOT[:-1]}",  # broken and nested look-alikes: plain text
    f" {EOT} \n\n{EOT}\n",                          # surrounded by whitespace
]
CORPUS = ENGLISH + EOT + CHINESE + DOC + "".join(TEXTS)


@pytest.fixture(scope="module")
def tokenizers():
    return {"char": CharTokenizer.train(CORPUS, SPECIALS),
            "bpe": BPETokenizer.train(CORPUS, 400, SPECIALS)}


def _special_ids(tok):
    return {t: tok.encode(t)[0] for t in SPECIALS}


@pytest.mark.parametrize("kind", ["char", "bpe"])
@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_with_special_tokens(tokenizers, kind, text):
    tok = tokenizers[kind]
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_each_special_token_is_one_id_and_the_longest_wins(tokenizers, kind):
    tok = tokenizers[kind]
    ids = _special_ids(tok)
    assert all(len(tok.encode(t)) == 1 for t in SPECIALS)
    assert len(set(ids.values())) == 3 and tok.special_tokens == SPECIALS
    assert tok.encode(EOT * 3) == [ids[DOUBLE], ids[EOT]]
    assert tok.encode(f"贾{DOC}宝") == tok.encode("贾") + [ids[DOC]] + tok.encode("宝")
    look_alike = f"<|endof{EOT}"
    assert tok.encode(look_alike) == tok.encode("<|endof") + [ids[EOT]]
    assert tok.token_str(ids[DOC]) == DOC


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_decode_can_skip_special_tokens(tokenizers, kind):
    tok = tokenizers[kind]
    ids = tok.encode(f"贾宝玉{EOT}林黛玉{DOUBLE}")
    assert tok.decode(ids) == f"贾宝玉{EOT}林黛玉{DOUBLE}"
    assert tok.decode(ids, skip_special_tokens=True) == "贾宝玉林黛玉"


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_special_tokens_are_saved_and_read_back(tokenizers, kind, tmp_path):
    tok = tokenizers[kind]
    tok.save(tmp_path / "tokenizer.json")
    again = load_tokenizer(tmp_path / "tokenizer.json")
    assert again.special_tokens == SPECIALS and again.vocab_size == tok.vocab_size
    for text in TEXTS:
        assert again.encode(text) == tok.encode(text)


def test_char_vocabulary_holds_only_characters_outside_special_tokens():
    tok = CharTokenizer.train(f"ab{DOC}ba", [DOC])
    assert tok.chars == ["a", "b"] and tok.vocab_size == 3 and tok.encode(DOC) == [2]
    with pytest.raises(UserError, match="'文'"):
        tok.encode("文")  # a character seen only inside a special token is not in the vocabulary


def test_char_tokenizer_file_with_bad_special_tokens_is_one_line(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"kind": "char", "chars": ["a"], "special_tokens": ["x", "x"]}))
    with pytest.raises(UserError, match="special_tokens: the special token 'x' is given twice"):
        load_tokenizer(path)
    path.write_text(json.dumps({"kind": "char", "chars": ["a"], "special_tokens": "x"}))
    with pytest.raises(UserError, match="special_tokens must be a list"):
        load_tokenizer(path)


def _learnt_tokens(tok: BPETokenizer) -> list[str]:
    """The vocabulary entries made by merges, as text."""
    model = json.loads(tok.hf.to_str())["model"]
    return [tok.hf.decoder.decode([a + b]) for a, b in model["merges"]]


def test_bpe_training_never_merges_across_or_into_a_special_token():
    # Short documents of letters and spaces, separated by <|endoftext|>: "<", "|", ">" occur
    # only in the special token, so any learnt token holding one crossed or entered it.
    docs = ["the cat sat", "a dog ran far", "so the cat ran", "at the far end"] * 60
    text = EOT.join(docs)
    with_special = BPETokenizer.train(text, 320, [EOT])
    learnt = _learnt_tokens(with_special)
    assert len(learnt) > 20
    assert not [t for t in learnt if set(t) & set("<|>")]
    ids = with_special.encode(text)
    assert ids.count(with_special.encode(EOT)[0]) == len(docs) - 1
    # The same text trained without it learns pieces of the separator, joined to the text.
    plain = _learnt_tokens(BPETokenizer.train(text, 320))
    assert [t for t in plain if set(t) & set("<|>")]


def test_bpe_ids_agree_with_hugging_face_tokenizers_on_the_same_merges(tokenizers):
    """A `tokenizers` BPE built from our vocabulary and merges, with the same special
    tokens, encodes every text (and a stream of its lines) to the same ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    ours = tokenizers["bpe"]
    model = json.loads(ours.hf.to_str())["model"]
    theirs = Tokenizer(models.BPE(vocab=model["vocab"],
                                  merges=[tuple(m) for m in model["merges"]]))
    theirs.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    theirs.decoder = decoders.ByteLevel()
    theirs.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    assert [theirs.token_to_id(t) for t in SPECIALS] == [ours.encode(t)[0] for t in SPECIALS]
    for text in [*TEXTS, ENGLISH[:3000], CHINESE[:2000], "naïve café 2026 — 今天"]:
        want = theirs.encode(text).ids
        assert ours.encode(text) == want
        assert list(ours.encode_iterable(text.splitlines(keepends=True), chunk_chars=64)) == want
        assert ours.decode(want) == theirs.decode(want, skip_special_tokens=False) == text


@pytest.mark.slow
def test_imported_smollm2_decodes_its_special_tokens_verbatim(tmp_path):
    """SmolLM2's tokenizer as `depthlab hf import-gguf` writes it (tokenizer.json, read back
    by load_tokenizer): special tokens are one id each and come back in the text."""
    pytest.importorskip("gguf")
    from depthlab.hf.gguf_import import _Metadata, open_gguf, smollm2_path, tokenizer_from_gguf

    try:
        path = smollm2_path()
    except UserError as e:
        pytest.skip(str(e))
    hf, _ = tokenizer_from_gguf(_Metadata(open_gguf(path), path))
    hf.save(str(tmp_path / "tokenizer.json"))
    tok = load_tokenizer(tmp_path / "tokenizer.json")
    text = "Hi<|endoftext|>there<|im_start|>"
    ids = tok.encode(text)
    assert ids == hf.encode(text).ids and len(ids) == 4
    assert tok.decode(ids) == text
    assert tok.decode(ids, skip_special_tokens=True) == "Hithere"
    chat = "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n<|im_start|>assistant\n 13023 ✓"
    assert list(tok.encode_iterable(chat.splitlines(keepends=True), chunk_chars=8)) == tok.encode(chat)


def test_a_tokenizer_that_cannot_be_cut_exactly_refuses_to_stream():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(UserError, match="encode_iterable: this tokenizer splits text with"):
        list(BPETokenizer(hf).encode_iterable(["a b"]))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.normalizer = normalizers.Lowercase()
    with pytest.raises(UserError, match="normalizes text"):
        list(BPETokenizer(hf).encode_iterable(["a b"]))


# --- documents and runs --------------------------------------------------------------

def test_documents_are_separated_only_when_asked(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("第一篇。\n", encoding="utf-8")
    (docs / "b.txt").write_text("second one\n", encoding="utf-8")
    assert load_corpus(str(docs)).text == "第一篇。\n\nsecond one\n"  # as runs were trained
    assert load_corpus(str(docs), separate_documents=True).text == \
        f"第一篇。\n{DOC_SEPARATOR}second one\n"
    for kind in ("char", "bpe"):
        data = DataConfig(corpus=str(docs), tokenizer=kind, bpe_vocab=300,
                          separate_documents=True)
        prepared = prepare_data(data, tmp_path / "cache")
        ids = [*prepared.train, *prepared.val]
        eot = prepared.tokenizer.encode(DOC_SEPARATOR)
        assert len(eot) == 1 and ids.count(eot[0]) == 1
        assert prepared.tokenizer.decode(ids) == f"第一篇。\n{DOC_SEPARATOR}second one\n"
        plain = prepare_data(replace(data, separate_documents=False), tmp_path / "cache")
        assert plain.path != prepared.path and DOC_SEPARATOR not in plain.tokenizer.decode(
            [*plain.train, *plain.val])


def test_special_tokens_in_a_config_and_on_the_train_command(tmp_path):
    cfg = apply_overrides(Config(), ['data.special_tokens=["<|endoftext|>", "<|sep|>"]'])
    assert cfg.data.special_tokens == ("<|endoftext|>", "<|sep|>")
    assert Config.from_dict(json.loads(cfg.to_json())) == cfg
    with pytest.raises(ConfigError, match="data.special_tokens must be a list of strings"):
        apply_overrides(Config(), ["data.special_tokens=<|endoftext|>"])
    with pytest.raises(ConfigError, match="data.special_tokens must be distinct non-empty"):
        apply_overrides(Config(), ['data.special_tokens=["a", "a"]'])

    from depthlab.cli import build_parser
    from depthlab.cli.train_cmd import resolve

    args = build_parser().parse_args(["train", "--special-token", "<|endoftext|>",
                                      "--special-token", "<|sep|>"])
    assert resolve(args).data.special_tokens == ("<|endoftext|>", "<|sep|>")
    assert resolve(build_parser().parse_args(["train"])).data.special_tokens == ()


def test_train_command_reserves_special_tokens_for_the_run(tmp_path, monkeypatch, capsys):
    from depthlab import rundir
    from depthlab.cli import main

    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("HAMLET:\nTo be, or not to be<|sep|>\n" * 40, encoding="utf-8")
    (docs / "b.txt").write_text("贾宝玉：你好。\n" * 40, encoding="utf-8")
    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--corpus", str(docs), "--steps", "2",
                 "--special-token", "<|sep|>", "--set", "data.separate_documents=true",
                 "--out", str(run), "--no-progress"]) == 0
    cfg, _ = rundir.read_config(run)
    assert cfg.data.special_tokens == ("<|sep|>",) and cfg.data.separate_documents
    tok = rundir.load_tokenizer(run)
    assert tok.special_tokens == ["<|sep|>", DOC_SEPARATOR]
    assert tok.vocab_size == cfg.model.vocab_size
    assert len(tok.encode("<|sep|><|endoftext|>")) == 2
    capsys.readouterr()
    assert main(["train", "--preset", "tiny", "--corpus", str(docs), "--special-token", "",
                 "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert "data.special_tokens" in err and len(err.splitlines()) == 1
