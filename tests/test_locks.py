"""A lock never follows a link: every command that takes a directory's lock refuses a
`.lock` that is a symlink (or a hard link, or someone's file) and leaves the file it
names unchanged. The commands are derived from the code: every function that takes a
lock (calls DirLock, Claim or claim_target) must have a case here."""

import ast
import os
import shutil
import sys
from pathlib import Path

import pytest
from test_gguf import write_tiny_gguf
from test_hf_refusals import BASE, write_hf
from train_helpers import TEXT, cache, config  # noqa: F401 (cache: autouse fixture)

import depthlab
from depthlab.cli import main
from depthlab.errors import UserError
from depthlab.experiments.runner import own_run
from depthlab.rundir import DirLock
from depthlab.train import train

PACKAGE = Path(depthlab.__file__).parent
LOCK_TAKERS = ("DirLock", "Claim", "claim_target")
USER_TEXT = "my thesis, chapter 3\n"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """A finished run, an export of it, a Hugging Face folder, a GGUF file and a shard
    folder."""
    root = tmp_path_factory.mktemp("locks")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEPTHLAB_CACHE", str(root / "cache"))
        run = root / "run"
        train(config(steps=2, ckpt_every=2), run, progress=False)
        assert main(["hf", "export", str(run), "--out", str(root / "export")]) == 0
        assert main(["data", "prepare", "--corpus", TEXT, "--tokenizer", "char", "--out",
                     str(root / "shards"), "--no-progress"]) == 0
    gguf = root / "tiny.gguf"
    write_tiny_gguf(gguf)
    return {"run": run, "export": root / "export", "hf": write_hf(root / "hf", BASE),
            "gguf": gguf, "shards": root / "shards"}


def _copy_of(tmp: Path, src: Path) -> Path:
    shutil.copytree(src, tmp / src.name, ignore=shutil.ignore_patterns(".lock"))
    return tmp / src.name


def _train_argv(out: Path, *extra: str) -> list[str]:
    return ["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(out), "--steps", "2",
            "--no-progress", "--set", "train.ckpt_every=2", *extra]


# name -> (the function that takes the lock, a builder of (argv or callable, locked dir))
def _train_fresh(tmp, made):
    return _train_argv(tmp / "new"), tmp / "new"


def _train_resume(tmp, made):
    run = _copy_of(tmp, made["run"])
    return ["train", "--config", str(run / "config.json"), "--out", str(run), "--resume",
            "--no-progress"], run


def _train_overwrite(tmp, made):
    run = _copy_of(tmp, made["run"])
    return _train_argv(run, "--overwrite"), run


def _hf_export_force(tmp, made):
    out = _copy_of(tmp, made["export"])
    return ["hf", "export", str(made["run"]), "--out", str(out), "--force"], out


def _hf_import_force(tmp, made):
    out = _copy_of(tmp, made["run"])
    return ["hf", "import", str(made["hf"]), "--out", str(out), "--force"], out


def _hf_import_gguf_force(tmp, made):
    out = _copy_of(tmp, made["run"])
    return ["hf", "import-gguf", str(made["gguf"]), "--out", str(out), "--force"], out


def _data_prepare_overwrite(tmp, made):
    out = _copy_of(tmp, made["shards"])
    return ["data", "prepare", "--corpus", TEXT, "--tokenizer", "char", "--out", str(out),
            "--overwrite", "--no-progress"], out


def _experiment(tmp, made):
    folder = tmp / "exp" / "residual"
    folder.mkdir(parents=True)
    return ["experiment", "residual", "--budget", "micro", "--corpus", TEXT, "--out",
            str(tmp / "exp"), "--no-progress"], folder


def _experiment_own_run(tmp, made):
    """A run an experiment writes itself (measured at init, or by its own trainer)."""
    run = _copy_of(tmp, made["run"])

    def call() -> int:
        try:
            own_run(run, lambda: pytest.fail("wrote through a refused lock"))
        except UserError as e:
            print(f"depthlab: error: {e}", file=sys.stderr)
            return e.exit_code
        return 0
    return call, run


COMMANDS = {
    "train": ("depthlab/train/startup.py:claim.take", _train_fresh),
    "train --resume": ("depthlab/train/startup.py:claim.take", _train_resume),
    "train --overwrite": ("depthlab/train/startup.py:claim.take", _train_overwrite),
    "hf export --force": ("depthlab/hf/convert.py:export_run", _hf_export_force),
    "hf import --force": ("depthlab/hf/convert.py:import_checkpoint", _hf_import_force),
    "hf import-gguf --force (and lab's SmolLM2 import)":
        ("depthlab/hf/gguf_import.py:import_gguf", _hf_import_gguf_force),
    "data prepare --overwrite": ("depthlab/shard_prepare.py:prepare", _data_prepare_overwrite),
    "experiment": ("depthlab/experiments/runner.py:run_experiment", _experiment),
    "an experiment's own runs": ("depthlab/experiments/runner.py:own_run", _experiment_own_run),
}
# The lock machinery itself: what every entry above goes through.
MACHINERY = {"depthlab/outdir.py:claim_target", "depthlab/outdir.py:Claim.acquire"}


def _calls_in(node: ast.AST, scope: list[str]) -> set[str]:
    """The dotted scopes (Class.method, f.inner) below `node` that call a lock taker."""
    found = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.ClassDef)):
            found |= _calls_in(child, [*scope, child.name])
            continue
        if isinstance(child, ast.Call) and scope:
            f = child.func
            if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)) in LOCK_TAKERS:
                found.add(".".join(scope))
        found |= _calls_in(child, scope)
    return found


def lock_takers() -> set[str]:
    """Every function in the package that calls DirLock(...), Claim(...) or claim_target(...)."""
    return {f"depthlab/{path.relative_to(PACKAGE)}:{scope}" for path in PACKAGE.rglob("*.py")
            for scope in _calls_in(ast.parse(path.read_text(encoding="utf-8")), [])}


def test_every_function_that_takes_a_lock_has_a_case():
    covered = {taker for taker, _ in COMMANDS.values()} | MACHINERY
    assert lock_takers() == covered


def _victim(tmp: Path) -> Path:
    victim = tmp / "user.txt"
    victim.write_text(USER_TEXT)
    return victim


def _run(argv, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = argv() if callable(argv) else main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    return code, [line for line in lines if not line.startswith("depthlab: reading")]


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_symlinked_lock_is_refused_and_its_target_unchanged(tmp_path, made, command, capsys):
    argv, locked = COMMANDS[command][1](tmp_path, made)
    locked.mkdir(parents=True, exist_ok=True)
    victim = _victim(tmp_path)
    (locked / ".lock").symlink_to(victim)
    before = sorted(p.name for p in locked.iterdir())
    code, err = _run(argv, capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0] == (f"depthlab: error: {locked / '.lock'}: is a symbolic link; depthlab "
                      "writes a lock only into a file it creates; nothing was changed "
                      "(remove the link)")
    assert victim.read_text() == USER_TEXT
    assert (locked / ".lock").is_symlink()
    assert sorted(p.name for p in locked.iterdir()) == before


def test_a_hard_link_or_a_foreign_file_as_lock_is_refused(tmp_path):
    victim = _victim(tmp_path)
    (tmp_path / "d").mkdir()
    os.link(victim, tmp_path / "d" / ".lock")
    with pytest.raises(UserError, match=r"is a file with 2 names \(a hard link\)"):
        DirLock(tmp_path / "d").acquire()
    assert victim.read_text() == USER_TEXT
    (tmp_path / "d" / ".lock").unlink()
    (tmp_path / "d" / ".lock").write_text(USER_TEXT)  # someone's own file by that name
    with pytest.raises(UserError, match=r"holds 21 bytes that are not a process id"):
        DirLock(tmp_path / "d").acquire()
    assert (tmp_path / "d" / ".lock").read_text() == USER_TEXT
    os.mkfifo(tmp_path / "e")
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / ".lock").symlink_to(tmp_path / "e")
    with pytest.raises(UserError, match="is a symbolic link"):
        DirLock(tmp_path / "f").acquire()


def test_a_killed_holders_lock_file_is_taken_again(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / ".lock").write_text("4242\n")  # what a kill -9 leaves
    with DirLock(tmp_path / "d"):
        assert (tmp_path / "d" / ".lock").read_text() == f"{os.getpid()}\n"
    assert not (tmp_path / "d" / ".lock").exists()
