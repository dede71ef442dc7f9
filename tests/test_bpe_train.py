"""BPE training is bounded: refused up front when it may not fit, stopped by a signal."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from depthlab import bpe_train
from depthlab.config import DataConfig
from depthlab.errors import UserError
from depthlab.tokenizer import BPETokenizer, prepare_data

REPO = Path(__file__).resolve().parent.parent


def test_a_corpus_that_may_not_fit_is_refused_before_training(tmp_path, monkeypatch):
    corpus = tmp_path / "big.txt"
    corpus.write_text("the cat sat on the mat\n" * 50_000, encoding="utf-8")  # 1.15 MB
    free = 100 << 20
    monkeypatch.setattr(bpe_train, "available_bytes", lambda: free)
    started = []
    monkeypatch.setattr(bpe_train.subprocess, "Popen", lambda *a, **k: started.append(a))
    with pytest.raises(UserError) as e:
        prepare_data(DataConfig(corpus=str(corpus), tokenizer="bpe", bpe_vocab=5000),
                     tmp_path / "cache")
    need = bpe_train.estimate(len("the cat sat on the mat\n") * 50_000, 5000)
    assert need > free and not started
    message = str(e.value)
    assert "\n" not in message
    assert f"corpus {str(corpus)!r}" in message and "data.bpe_vocab=5000" in message
    assert bpe_train.human(need) in message and "100.0 MB is free" in message
    assert not (tmp_path / "cache").exists()


def test_the_estimate_counts_bytes_not_characters():
    text = "红楼梦" * 1000  # 3 bytes a character
    assert bpe_train.utf8_size(text, step=7) == len(text.encode("utf-8"))
    assert bpe_train.estimate(9000, 300) - bpe_train.estimate(0, 300) == 9000 * \
        bpe_train.BYTES_PER_BYTE


def test_a_trainer_that_dies_is_one_line(monkeypatch):
    """A child killed by the kernel (out of memory, say) is named, never a traceback."""
    real = subprocess.Popen

    def doomed(argv, **kw):
        return real([sys.executable, "-c", "import os; os.abort()"], **kw)

    monkeypatch.setattr(bpe_train.subprocess, "Popen", doomed)
    with pytest.raises(UserError, match=r"^the text: BPE training at data.bpe_vocab=300 "
                                        r"failed: the trainer was killed by SIGABRT"):
        BPETokenizer.train("a b c " * 100, 300)


def _trainer_of(pid: int) -> int | None:
    """The pid of `pid`'s BPE-training child, if it has started."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and b"depthlab.bpe_train" in cmd:
            return int(stat.parent.name)
    return None


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_bpe_training_at_once(tmp_path, sig):
    """The Rust trainer never returns to Python while it merges: a signal used to wait
    for the end (17 min on 200 MB). One character repeated trains for minutes here; the
    signal stops it at once, exit 130, nothing left in --out, no trainer left running."""
    corpus = tmp_path / "one.txt"
    corpus.write_text("a" * 2_000_000, encoding="ascii")
    out = tmp_path / "run"
    env = os.environ | {"OMP_NUM_THREADS": "1", "DEPTHLAB_CACHE": str(tmp_path / "cache"),
                        "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "depthlab", "train", "--preset", "tiny",
                             "--corpus", str(corpus), "--tokenizer", "bpe", "--set",
                             "data.bpe_vocab=2000", "--out", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env=env)
    try:
        child = None
        deadline = time.monotonic() + 120
        while child is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            child = _trainer_of(proc.pid)
        assert child is not None, proc.stderr.read() if proc.poll() is not None else "no trainer"
        time.sleep(0.5)  # into the merges
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)  # training alone takes minutes
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert err.strip() == "depthlab: interrupted"
    assert not out.exists()
    assert not Path(f"/proc/{child}").exists()


REFUSED = """
import sys
import depthlab.bpe_train as bpe_train
bpe_train.available_bytes = lambda: 50 << 20
from depthlab.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_the_train_command_refuses_in_one_line_and_leaves_no_out(tmp_path):
    corpus = tmp_path / "big.txt"
    corpus.write_text("the cat sat on the mat\n" * 50_000, encoding="utf-8")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", REFUSED, "train", "--preset", "tiny",
                           "--corpus", str(corpus), "--tokenizer", "bpe", "--out", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env=os.environ | {"OMP_NUM_THREADS": "1",
                                                      "DEPTHLAB_CACHE": str(tmp_path / "c"),
                                                      "PYTHONPATH": str(REPO)})
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith(f"depthlab: error: corpus {str(corpus)!r}: BPE")
    assert "50.0 MB is free" in line
    assert not out.exists()
