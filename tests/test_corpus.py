"""Corpora: the bundled ones clean up as documented; bad input fails on one line naming the file."""

from pathlib import Path

import pytest

from depthlab.corpus import clean_hongloumeng, clean_play, corpus_label, load_corpus
from depthlab.errors import UserError

DATA = Path(__file__).parent / "data"

PLAY = """# Othello

## ACT I

### SCENE I. Venice. A street.

_Enter RODERIGO and IAGO_

**RODERIGO**{BR}
Tush! never tell me; I take it much unkindly{BR}
That thou, Iago, who hast had my purse

**IAGO**{BR}
_\\[Aside]_ 'Sblood, but you will not hear me:{BR}
\\--odours savours sweet

_Exeunt_
""".replace("{BR}", "  ")  # Markdown line breaks: two trailing spaces


def test_clean_play_gives_speaker_blocks():
    text = clean_play(PLAY)
    assert text == (
        "RODERIGO:\nTush! never tell me; I take it much unkindly\n"
        "That thou, Iago, who hast had my purse\n\n"
        "IAGO:\n'Sblood, but you will not hear me:\n--odours savours sweet\n"
    )


def test_clean_hongloumeng_strips_commentary():
    raw = "第一回\r\n\r\n\r\n\r\n列位看官【甲戌侧批：妙！】：你道［伏下文。］此书（按：缺字）从何而来？\n"
    assert clean_hongloumeng(raw) == "第一回\n\n列位看官：你道此书从何而来？\n"


def test_bundled_corpora_load_clean():
    hlm = load_corpus("hongloumeng").text
    assert "【" not in hlm and "］" not in hlm and "今天" in hlm and len(hlm) > 500_000
    play = load_corpus("shakespeare").text
    assert play.startswith("THESEUS:\nNow, fair Hippolyta")
    assert "**" not in play and "_" not in play and "#" not in play


def test_local_file_and_folder(tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("beta\n", encoding="utf-8")
    assert load_corpus(str(tmp_path)).text == "alpha\n\nbeta\n"
    assert load_corpus(str(DATA / "tiny_shakespeare.txt")).text.startswith("HAMLET:")
    assert corpus_label(str(DATA / "tiny_shakespeare.txt")) == "tiny_shakespeare"


@pytest.mark.parametrize("content, phrase", [
    (b"\x00\x01\x02binary", "binary"),
    ("caf\xe9".encode("latin-1"), "not UTF-8"),
    (b"", "empty file"),
    (b"  \n", "holds only whitespace (3 B), no text to train on"),
    (b" \n\t" * 34_000, "holds only whitespace (99.6 KB), no text to train on"),
])
def test_bad_files_name_the_file(tmp_path, content, phrase):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(UserError) as e:
        load_corpus(str(path))
    message = str(e.value)
    assert str(path) in message and phrase in message and "\n" not in message


def test_missing_path_and_empty_folder(tmp_path):
    with pytest.raises(UserError, match="no such file or folder"):
        load_corpus(str(tmp_path / "nope.txt"))
    with pytest.raises(UserError, match="no .txt files"):
        load_corpus(str(tmp_path))


@pytest.mark.parametrize("spec", ["", "  "])
def test_an_empty_corpus_name_is_refused_not_read_as_the_current_folder(spec, tmp_path, monkeypatch):
    # Path("") is "." : --corpus '' used to read every .txt under the working folder
    (tmp_path / "notes.txt").write_text("not a corpus anyone chose", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="empty; give shakespeare, hongloumeng or a .txt file"):
        load_corpus(spec)


def test_a_folder_named_like_a_text_is_a_folder(tmp_path):
    """rglob('*.txt') also matches a folder `sub.txt/`: its files are read, the folder is
    not opened as a text (it is no "device, pipe or socket")."""
    corpus = tmp_path / "texts"
    (corpus / "sub.txt").mkdir(parents=True)
    with pytest.raises(UserError) as e:
        load_corpus(str(corpus))
    assert str(e.value) == f"{corpus}: folder holds no .txt files (sub.txt is a folder)"
    (corpus / "sub.txt" / "a.txt").write_text("alpha\n", encoding="utf-8")
    (corpus / "b.txt").write_text("beta\n", encoding="utf-8")
    assert load_corpus(str(corpus)).text == "beta\n\nalpha\n"
    assert load_corpus(str(corpus)).sources == (str(corpus / "b.txt"),
                                                str(corpus / "sub.txt" / "a.txt"))


def test_a_token_cache_that_cannot_be_written_is_named_by_its_path(tmp_path, monkeypatch,
                                                                    capsys):
    import errno

    import depthlab.tokenizer as tokenizer
    from depthlab.cli import main

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(tokenizer, "_build_entry", full)
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))
    code = main(["train", "--preset", "tiny", "--corpus", str(DATA / "tiny_shakespeare.txt"),
                 "--out", str(tmp_path / "run"), "--no-progress"])
    assert code == 2 and capsys.readouterr().err.strip() == (
        f"depthlab: error: {tmp_path / 'cache'}: the token cache cannot be written: No space "
        "left on device; free space there or set DEPTHLAB_CACHE to another folder (nothing "
        "was written to the run)")
    assert not (tmp_path / "run").exists()
