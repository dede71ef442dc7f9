"""Token shards: `depthlab data prepare` streams a corpus into shards whose ids are the
token cache's, training reads them by offset and resumes at the exact window, and a
folder that is not what its manifest says is refused in one line, nothing written."""

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tokenizers import AddedToken
from train_helpers import DATA, TEXT, cache, config  # noqa: F401 (cache: autouse fixture)

from depthlab import corpus as corpus_mod
from depthlab.cli import main
from depthlab.config import DataConfig
from depthlab.corpus import DOC_SEPARATOR, load_corpus
from depthlab.errors import UserError
from depthlab.metrics import read_metrics
from depthlab.shard_prepare import prepare
from depthlab.shards import TokenStream, open_shards
from depthlab.tokenizer import (
    BPETokenizer,
    CharTokenizer,
    prepare_data,
    tokenizer_fingerprint,
)


@pytest.fixture
def folder(tmp_path):
    """Two English files and a Chinese one (multi-byte characters cut by small reads)."""
    text = Path(TEXT).read_text(encoding="utf-8")
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "a.txt").write_text(text[:6000], encoding="utf-8")
    (root / "b.txt").write_text("\ufeff" + text[6000:12000], encoding="utf-8")  # a BOM
    (root / "c.txt").write_text((DATA / "tiny_hongloumeng.txt").read_text("utf-8")[:3000],
                                encoding="utf-8")
    return root


def ids_of(out: Path) -> tuple[np.ndarray, np.ndarray]:
    data = open_shards(out)
    return np.asarray(data.train), np.asarray(data.val)


def run_cli(argv, capsys) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("separate", [False, True])
def test_char_shards_hold_the_token_cache_ids(folder, tmp_path, monkeypatch, separate):
    monkeypatch.setattr(corpus_mod, "READ_BYTES", 257)  # odd reads split UTF-8 characters
    out = tmp_path / "shards"
    done = prepare(str(folder), "char", out, shard_tokens=700, separate_documents=separate,
                   progress=False)
    cache_data = prepare_data(DataConfig(corpus=str(folder), separate_documents=separate))
    train, val = ids_of(out)
    assert np.array_equal(train, cache_data.train) and np.array_equal(val, cache_data.val)
    opened = open_shards(out)
    assert tokenizer_fingerprint(opened.tokenizer) == tokenizer_fingerprint(cache_data.tokenizer)
    assert opened.corpus_sha256 == load_corpus(str(folder), separate).sha256
    assert done.shards == -(-done.tokens // 700) > 10 and train.dtype == np.uint16


def test_bpe_shards_hold_encode_corpus_ids(folder, tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_mod, "READ_BYTES", 301)
    text = load_corpus(str(folder), separate_documents=True).text
    tok = BPETokenizer.train(text, 400, [DOC_SEPARATOR])
    tok.save(tmp_path / "tok.json")
    out = tmp_path / "shards"
    prepare(str(folder), str(tmp_path / "tok.json"), out, shard_tokens=500,
            separate_documents=True, progress=False)
    train, val = ids_of(out)
    want = tok.encode_corpus(text, np.uint16)
    assert np.array_equal(np.concatenate([train, val]), want)
    assert np.array_equal(want, tok.encode(text))  # and the cache's ids are encode's


@pytest.mark.parametrize("lstrip", [False, True])  # True: the encode_batch path
def test_bpe_encode_arrays_equals_encode_in_small_chunks(folder, lstrip):
    text = load_corpus(str(folder), separate_documents=True).text
    tok = BPETokenizer.train(text, 400, [DOC_SEPARATOR])
    if lstrip:
        tok.hf.add_special_tokens([AddedToken("<|sep|>", lstrip=True)])
        text = text.replace("\n\n", " <|sep|>\n", 20)
    pieces = (text[i:i + 97] for i in range(0, len(text), 97))
    got = np.concatenate(list(tok.encode_arrays(pieces, np.uint16, chunk_chars=300)))
    assert got.tolist() == tok.encode(text)


def test_char_encode_arrays_refuses_an_unknown_character():
    tok = CharTokenizer(list("ab"))
    assert np.concatenate(list(tok.encode_arrays(["abba"], np.uint16))).tolist() == [0, 1, 1, 0]
    with pytest.raises(UserError, match="'c' is not in this char tokenizer"):
        list(tok.encode_arrays(["abc"], np.uint16))


def test_a_vocabulary_past_65536_ids_is_written_as_uint32(tmp_path):
    text = Path(TEXT).read_text(encoding="utf-8")
    wide = CharTokenizer(sorted(set(text) | {chr(0x20000 + i) for i in range(70000)}))
    wide.save(tmp_path / "wide.json")
    prepare(TEXT, str(tmp_path / "wide.json"), tmp_path / "s", shard_tokens=6000,
            progress=False)
    train, val = ids_of(tmp_path / "s")
    assert train.dtype == np.uint32 and np.concatenate([train, val]).tolist() == wide.encode(text)
    assert (tmp_path / "s" / "tiny_shakespeare_00000.bin").stat().st_size == 1024 + 4 * 6000


def test_token_stream_slices_across_shard_ends():
    whole = np.arange(100, dtype=np.uint16)
    maps = [whole[:7], whole[7:30], whole[30:31], whole[31:]]
    s = TokenStream(maps, 5, 95)
    assert len(s) == 90 and s[3] == 8 and s[-1] == 94
    for a in range(0, 90, 7):
        for n in (0, 1, 13, 40):
            assert np.array_equal(s[a:a + n], whole[5 + a:5 + min(a + n, 90)])


@pytest.mark.slow  # four tiny runs: ~7 s on the shared 2-core machine
def test_training_on_shards_is_training_on_the_corpus_and_resumes_exactly(tmp_path):
    """The same windows as the token cache (so the same losses, bit for bit), and a run
    stopped at step 3 and resumed logs the uninterrupted run's losses."""
    from depthlab.train import train

    base = config(steps=6, ckpt_every=3, eval_every=3, probe_every=3)
    prepare(TEXT, "char", tmp_path / "shards", shard_tokens=3000, progress=False)
    sharded = replace(base, data=replace(base.data, shards=str(tmp_path / "shards")))
    train(base, tmp_path / "corpus", progress=False)
    train(sharded, tmp_path / "full", progress=False)
    first = train(sharded, tmp_path / "split", progress=False, max_steps=3)
    assert first.status == "interrupted" and first.step == 3
    train(sharded, tmp_path / "split", progress=False, resume=True)

    def log(run):
        return [(r["kind"], r["step"], r.get("loss"), r.get("val_loss"))
                for r in read_metrics(tmp_path / run) if r["kind"] in ("train", "eval")]

    assert len(log("full")) == 9 and log("full") == log("corpus") == log("split")
    record = json.loads((tmp_path / "full" / "config.json").read_text())
    assert record["corpus"]["spec"] == TEXT and record["config"]["data"]["shards"]

    # the folder prepared again with another tokenizer: the run's tokenizer refuses it
    other = CharTokenizer([*open_shards(tmp_path / "shards").tokenizer.chars, "\u20ac"])
    other.save(tmp_path / "other.json")
    prepare(TEXT, str(tmp_path / "other.json"), tmp_path / "shards", overwrite=True,
            progress=False)
    with pytest.raises(UserError, match=r"tokenizer.json: does not map the tokens the token "
                       r"shards in .*shards were encoded with"):
        train(sharded, tmp_path / "full", progress=False, resume=True)


@pytest.fixture
def shards(tmp_path):
    out = tmp_path / "shards"
    prepare(TEXT, "char", out, shard_tokens=5000, progress=False)
    return out


def _poke(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def _other_hash(path: Path) -> None:
    raw = path.read_bytes()
    at = raw.index(b'"tokenizer_sha256": "') + 21
    path.write_bytes(raw[:at] + b"0" * 64 + raw[at + 64:])


def _truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 2)


BROKEN = {  # what is done to the folder -> the file and the words of the refusal
    "truncated": (lambda d: _truncate(d / "tiny_shakespeare_00001.bin"),
                  r"tiny_shakespeare_00001.bin: truncated: 11,022 bytes"),
    "magic": (lambda d: _poke(d / "tiny_shakespeare_00000.bin", 0, b"GGUF"),
              r"tiny_shakespeare_00000.bin: not a depthlab token shard"),
    "manifest": (lambda d: (d / "manifest.json").unlink(),
                 r"manifest.json: missing: this is not a token shard folder"),
    "shard tokenizer": (lambda d: _other_hash(d / "tiny_shakespeare_00002.bin"),
                        r"tiny_shakespeare_00002.bin: encoded with tokenizer .*, the folder's"),
    "folder tokenizer": (lambda d: CharTokenizer(list("abc")).save(d / "tokenizer.json"),
                         r"tokenizer.json: maps other tokens than the ones the shards were"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_shard_folder_is_refused_in_one_line_and_nothing_is_written(
        shards, tmp_path, capsys, case):
    damage, words = BROKEN[case]
    damage(shards)
    code, err = run_cli(["train", "--preset", "tiny", "--shards", str(shards), "--out",
                         str(tmp_path / "run"), "--no-progress"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("depthlab: error: ") and re.search(words, err), err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("content", ["", "  \n\n\t \n"])
def test_an_empty_corpus_is_refused_and_nothing_is_written(tmp_path, capsys, content):
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.txt").write_text("some words\n")
    (tmp_path / "text" / "b.txt").write_text(content)
    code, err = run_cli(["data", "prepare", "--corpus", str(tmp_path / "text"), "--tokenizer",
                         "char", "--out", str(tmp_path / "out"), "--no-progress"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "b.txt: " in err, err
    assert ("empty file" if not content else "holds only whitespace") in err
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_ctrl_c_while_preparing_leaves_nothing(tmp_path, monkeypatch, capsys):
    from depthlab import shards as shards_mod

    add = shards_mod.ShardWriter.add

    def stop_in_the_third_shard(self, ids):
        add(self, ids)
        if len(self.done) >= 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(shards_mod.ShardWriter, "add", stop_in_the_third_shard)
    monkeypatch.setattr(corpus_mod, "READ_BYTES", 999)
    code, err = run_cli(["data", "prepare", "--corpus", TEXT, "--tokenizer", "char", "--out",
                         str(tmp_path / "out"), "--shard-tokens", "2000", "--no-progress"],
                        capsys)
    assert code == 130 and "interrupted" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no folder, no hidden stage


def test_train_refuses_shards_with_a_corpus(tmp_path, capsys):
    code, err = run_cli(["train", "--shards", str(tmp_path), "--corpus", TEXT, "--out",
                         str(tmp_path / "run")], capsys)
    assert code == 2 and "--shards trains on the text and tokenizer of its folder; drop " \
        "--corpus" in err and not (tmp_path / "run").exists()


def test_out_is_replaced_only_with_overwrite_and_only_when_it_is_a_shard_folder(
        shards, tmp_path, capsys):
    argv = ["data", "prepare", "--corpus", TEXT, "--tokenizer", "char", "--no-progress",
            "--shard-tokens", "7000", "--out"]
    code, err = run_cli([*argv, str(shards)], capsys)
    assert code == 2 and "holds a token shard folder depthlab wrote" in err
    assert "add --overwrite" in err and len(list(shards.glob("*.bin"))) == 4
    assert main([*argv, str(shards), "--overwrite"]) == 0
    assert len(list(shards.glob("*.bin"))) == 3 and len(open_shards(shards).train) > 0
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    code, err = run_cli([*argv, str(tmp_path / "notes"), "--overwrite"], capsys)
    assert code == 2 and "todo.txt" in err and "nothing was changed" in err
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["todo.txt"]


def test_a_tokenizer_that_cannot_be_cut_is_refused_before_writing(tmp_path, capsys):
    from tokenizers import normalizers

    tok = BPETokenizer.train(Path(TEXT).read_text(), 300)
    tok.hf.normalizer = normalizers.Lowercase()
    tok.save(tmp_path / "tok.json")
    code, err = run_cli(["data", "prepare", "--corpus", TEXT, "--tokenizer",
                         str(tmp_path / "tok.json"), "--out", str(tmp_path / "out"),
                         "--no-progress"], capsys)
    assert code == 2 and "normalizes text (Lowercase)" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_cli_prepare_prints_what_it_wrote(tmp_path, capsys):
    assert main(["data", "prepare", "--corpus", TEXT, "--tokenizer", "char", "--out",
                 str(tmp_path / "s"), "--no-progress"]) == 0
    line = capsys.readouterr().out.strip()
    n = len(Path(TEXT).read_text())
    assert line.startswith(f"{n:,} uint16 tokens ({max(1, int(n * 0.1)):,} for validation)")
    shutil.rmtree(tmp_path / "s")
