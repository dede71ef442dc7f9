"""A write that fails is one line, whoever raised it (the OS, torch's serializer,
safetensors), naming the file and what was kept; exit codes say what happened: 0 only
when the work finished and was saved, 130 for an interrupt at any moment, never a
negative code or a traceback. Disk-full is simulated by raising the exact exceptions the
writers raise, and for real with a file-size limit (`ulimit -f`) in a subprocess."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import safetensors.torch
import torch
from safetensors import SafetensorError
from train_helpers import REPO, TEXT, cache  # noqa: F401 (cache: autouse fixture)

from depthlab.cli import main

# What the writers raise on a full disk (torch 2.x's PyTorchStreamWriter, safetensors 0.4+).
TORCH_FULL = ("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing "
              "file data/0: file write failed")
SAFETENSORS_FULL = ('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                    'message: "No space left on device" })')


def cli(capsys, *argv: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.strip().splitlines()
                  if not line.startswith(("depthlab: reading", "depthlab: stopped"))]


def train_argv(out: Path, *extra: str) -> list[str]:
    return ["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(out), "--steps", "4",
            "--set", "train.ckpt_every=2", "--no-progress", *extra]


def fail_on_call(n: int, real, exc: Exception):
    """`real`, except that its n-th call raises `exc`."""
    calls = []

    def fake(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise exc
        return real(*args, **kwargs)
    return fake


@pytest.mark.parametrize("target, n, exc", [
    ("torch.save", 2, RuntimeError(TORCH_FULL)),
    ("safetensors.torch.save_file", 3, SafetensorError(SAFETENSORS_FULL)),  # step 4's weights
    ("torch.save", 2, OSError(28, "No space left on device")),
])
def test_a_full_disk_during_a_checkpoint_is_one_line_naming_what_was_kept(
        tmp_path, capsys, monkeypatch, target, n, exc):
    module, name = target.rsplit(".", 1)
    owner = {"torch": torch, "safetensors.torch": safetensors.torch}[module]
    monkeypatch.setattr(owner, name, fail_on_call(n, getattr(owner, name), exc))
    run = tmp_path / "run"
    code, err = cli(capsys, *train_argv(run))
    assert code == 2 and len(err) == 1, err
    file = "state.pt" if name == "save" else "model.safetensors"
    assert err[0].startswith(f"depthlab: error: {run}/checkpoints/step_0000004/{file}: "
                             "cannot write ("), err
    assert err[0].endswith(f"); nothing was left half-written, the newest checkpoint on disk "
                           f"is step 2 ({run}/checkpoints/step_0000002); --resume continues "
                           "from it"), err
    if isinstance(exc, SafetensorError):
        assert "(No space left on device)" in err[0]
    monkeypatch.undo()
    assert cli(capsys, *train_argv(run, "--resume"))[0] == 0  # and it continues


@pytest.mark.parametrize("command", ["export", "import"])
def test_a_full_disk_in_hf_export_and_import_leaves_out_as_it_was(tmp_path, capsys,
                                                                  monkeypatch, command):
    from test_hf_refusals import BASE, write_hf

    run = tmp_path / "run"
    assert cli(capsys, *train_argv(run, "--steps", "2"))[0] == 0
    out = tmp_path / "out"
    argv = (["hf", "export", str(run), "--out", str(out)] if command == "export" else
            ["hf", "import", str(write_hf(tmp_path / "hf", BASE)), "--out", str(out)])
    assert cli(capsys, *argv)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(safetensors.torch, "save_file",
                        fail_on_call(1, None, SafetensorError(SAFETENSORS_FULL)))
    code, err = cli(capsys, *argv, "--force")
    assert code == 2 and err == [
        f"depthlab: error: {out}/model.safetensors: cannot write (No space left on device); "
        f"nothing was left half-written, {out} is as it was"], err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["run", "out", "cache", *(["hf"] if command == "import" else [])])  # no stage left


def _depthlab(*argv: str, cache_dir: Path, limit: int | None = None,
              **kw) -> subprocess.CompletedProcess:
    """`python -m depthlab ARGV`, under a file-size limit (SIGXFSZ ignored, as Python does,
    so a write past it fails with EFBIG instead of killing the process)."""
    pre = None
    if limit is not None:
        def pre() -> None:
            import resource
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return subprocess.run([sys.executable, "-m", "depthlab", *argv], cwd=REPO, text=True,
                          capture_output=True, preexec_fn=pre, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1",
                               "DEPTHLAB_CACHE": str(cache_dir)}, **kw)


@pytest.mark.slow
def test_a_file_size_limit_is_one_line_and_resume_continues(tmp_path):
    """ulimit -f: the 250 KB state.pt of step 4 cannot be written (the 117 KB weights can)."""
    run = tmp_path / "run"
    first = _depthlab(*train_argv(run, "--max-steps", "2"), cache_dir=tmp_path / "cache")
    assert first.returncode == 130, first.stderr
    limited = _depthlab(*train_argv(run, "--resume"), cache_dir=tmp_path / "cache",
                        limit=200_000)
    assert limited.returncode == 2 and "Traceback" not in limited.stderr, limited.stderr
    assert limited.stderr.strip() == (
        f"depthlab: error: {run}/checkpoints/step_0000004/state.pt: cannot write (File too "
        f"large); nothing was left half-written, the newest checkpoint on disk is step 2 "
        f"({run}/checkpoints/step_0000002); --resume continues from it")
    done = _depthlab(*train_argv(run, "--resume"), cache_dir=tmp_path / "cache")
    assert done.returncode == 0, done.stderr


AFTER_THE_WORK = """
import atexit, os, signal, sys
sys.argv = ["depthlab", *sys.argv[1:]]
from depthlab.cli import main
atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM),
                         os.kill(os.getpid(), signal.SIGINT)))  # during the shutdown
code = main()
os.kill(os.getpid(), signal.SIGTERM)  # after "completed" was printed
os.kill(os.getpid(), signal.SIGINT)
sys.exit(code)
"""


@pytest.mark.slow
def test_a_signal_after_the_work_is_saved_leaves_exit_code_0(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", AFTER_THE_WORK, *train_argv(run, "--steps",
                                                                                "2")],
                          cwd=REPO, text=True, capture_output=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1",
                               "DEPTHLAB_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.startswith("completed: step 2/2") and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_until_the_process_ends_exit_130(tmp_path, sig):
    """Ctrl-C (or SIGTERM) pressed again and again, from training through saving, the
    lock's release and the interpreter's shutdown: always 130, never -2 or -15."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "depthlab", *train_argv(
        run, "--steps", "100000", "--set", "train.ckpt_every=5")], cwd=REPO, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1", "DEPTHLAB_CACHE": str(tmp_path / "cache")})
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "checkpoints").is_dir():
        time.sleep(0.1)
    try:
        while proc.poll() is None:
            proc.send_signal(sig)
            time.sleep(0.002)
    except ProcessLookupError:
        pass
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err


@pytest.mark.parametrize("raised, code", [
    (lambda tmp: RuntimeError(TORCH_FULL), None),  # errno: the likely cause (disk, ulimit, I/O)
    (lambda tmp: SafetensorError(SAFETENSORS_FULL), 28),
    (lambda tmp: OSError(27, "File too large", tmp), 27),  # named by its temporary name
    (lambda tmp: OSError(28, "No space left on device"), 28),
])
def test_atomic_write_names_the_file_whoever_raised(tmp_path, raised, code):
    from depthlab.atomic import atomic_write

    target = tmp_path / "state.pt"

    def write(tmp: Path) -> None:
        raise raised(tmp)
    with pytest.raises(OSError) as e:
        atomic_write(target, write)
    assert e.value.filename == str(target) and e.value.strerror
    assert code is None or e.value.errno == code
    assert list(tmp_path.iterdir()) == []  # no temporary file left


def test_atomic_write_passes_other_errors_through(tmp_path):
    from depthlab.atomic import atomic_write

    def write(tmp: Path) -> None:
        raise RuntimeError("a bug, not a disk")
    with pytest.raises(RuntimeError, match="a bug, not a disk"):
        atomic_write(tmp_path / "x", write)
    with pytest.raises(FileNotFoundError) as e:  # a source the write reads keeps its name
        atomic_write(tmp_path / "y", lambda tmp: open(tmp_path / "missing", "rb"))
    assert e.value.filename == str(tmp_path / "missing")
