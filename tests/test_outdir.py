"""No command destroys what is not its own: every writer of a run directory takes its lock
(a trainer's directory cannot be replaced under it), --force/--overwrite replace only a
directory depthlab wrote as one run, never the command's source or a folder of runs, and
a refused command changes no file and leaves no folder or lock behind."""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_gguf import write_tiny_gguf
from test_hf_refusals import BASE, write_hf
from train_helpers import REPO, TEXT, cache, config  # noqa: F401 (cache: autouse fixture)

from depthlab.cli import main
from depthlab.config import Config, ModelConfig
from depthlab.errors import UserError
from depthlab.metrics import read_metrics
from depthlab.outdir import RUN, short, survey
from depthlab.rundir import MARKER_FILE, DirLock, load_model, read_config, write_config
from depthlab.train import train


def tree(root: Path) -> dict[str, str]:
    """Every file and folder under root with a hash of its bytes (folders: "dir")."""
    return {str(p.relative_to(root)): "dir" if p.is_dir() else
            hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))}


def cli(capsys, *argv: str) -> tuple[int, list[str]]:
    """The exit code and the error lines (progress notes such as import-gguf's left out)."""
    code = main(list(argv))
    lines = capsys.readouterr().err.strip().splitlines()
    return code, [line for line in lines if not line.startswith(("depthlab: reading",
                                                                 "depthlab: writing"))]


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    return write_hf(tmp_path_factory.mktemp("hf") / "ckpt", BASE)


@pytest.fixture
def a_run(tmp_path) -> Path:
    """A finished tiny run with a tokenizer, written by `train`."""
    run = tmp_path / "runs" / "a"
    train(config(steps=2, ckpt_every=2), run, progress=False)
    return run


# --- a trainer's directory cannot be replaced under it ------------------------------------

@pytest.mark.slow
def test_a_running_trainer_keeps_its_directory_against_every_hf_command(
        tmp_path, gguf_file, hf_dir, capsys):
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DEPTHLAB_CACHE": str(tmp_path / "cache")}
    trainer = subprocess.Popen(
        [sys.executable, "-m", "depthlab", "train", "--preset", "tiny", "--corpus", TEXT,
         "--out", str(run), "--no-progress", "--steps", "100000", "--seed", "1",
         "--set", "train.ckpt_every=3"], cwd=REPO, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (run / "checkpoints").is_dir():
            time.sleep(0.2)
        assert (run / "checkpoints").is_dir(), "the trainer did not start"
        assert survey(run).kind == RUN
        for argv in (["hf", "import-gguf", str(gguf_file), "--out", str(run), "--force"],
                     ["hf", "import", str(hf_dir), "--out", str(run), "--force"]):
            code, err = cli(capsys, *argv)
            assert code == 2 and err == [
                f"depthlab: error: {run}: this run directory is in use by process "
                f"{trainer.pid}; wait for it to finish or stop it"]
        assert DirLock.holder(run) == str(trainer.pid)  # the lock is where it was, still held
        assert not list(tmp_path.glob(".run.*"))  # nothing staged or renamed beside it
    finally:
        trainer.send_signal(signal.SIGINT)
        trainer.communicate(timeout=120)
    assert trainer.returncode == 130
    _, record = read_config(run)
    assert record["seed"] == 1 and "source" not in record  # the trainer's own config
    assert read_metrics(run, "run_end")[-1]["status"] == "interrupted"
    load_model(run)  # weights and config still belong together
    assert not (run / ".lock").exists()  # its holder removed it on the way out
    # once the trainer is gone, --force may replace the run it wrote
    assert cli(capsys, "hf", "import-gguf", str(gguf_file), "--out", str(run), "--force")[0] == 0
    assert read_config(run)[1]["source"]["format"] == "gguf"
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoints").exists()


# --- --force never deletes what is not its own ---------------------------------------------

def test_force_onto_a_folder_of_runs_is_refused_and_changes_nothing(
        tmp_path, a_run, gguf_file, hf_dir, capsys):
    runs = a_run.parent
    (runs / "notes.txt").write_text("mine")
    before = tree(runs)
    for argv in (["hf", "import-gguf", str(gguf_file), "--out", str(runs), "--force"],
                 ["hf", "import", str(hf_dir), "--out", str(runs), "--force"],
                 ["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(runs),
                  "--overwrite", "--steps", "2", "--no-progress"]):
        code, err = cli(capsys, *argv)
        assert code == 2 and len(err) == 1, (argv, err)
        assert "holds other runs (a); it is a folder of runs, not one" in err[0], err
        assert tree(runs) == before
    code, err = cli(capsys, "hf", "export", str(a_run), "--out", str(runs), "--force")
    assert code == 2 and "holds the source" in err[0] and tree(runs) == before


def test_force_onto_the_source_is_refused(tmp_path, a_run, hf_dir, gguf_file, capsys):
    before = tree(a_run)
    code, err = cli(capsys, "hf", "export", str(a_run), "--out", str(a_run), "--force")
    assert code == 2 and err == [f"depthlab: error: --out {a_run}: is the source of this "
                                 "command; choose another --out"]
    code, err = cli(capsys, "hf", "export", str(a_run), "--out", str(a_run / "hf"), "--force")
    assert code == 2 and "lies inside the source" in err[0]
    assert tree(a_run) == before
    hf_before = tree(hf_dir)
    code, err = cli(capsys, "hf", "import", str(hf_dir), "--out", str(hf_dir), "--force")
    assert code == 2 and "is the source of this command" in err[0]
    code, err = cli(capsys, "hf", "import", str(hf_dir), "--out", str(hf_dir.parent), "--force")
    assert code == 2 and "holds the source" in err[0]
    assert tree(hf_dir) == hf_before
    code, err = cli(capsys, "hf", "import-gguf", str(gguf_file), "--out", str(gguf_file.parent),
                    "--force")
    assert code == 2 and "holds the source" in err[0] and gguf_file.is_file()


def test_export_force_replaces_only_an_export(tmp_path, a_run, capsys):
    hf = tmp_path / "hf"
    code, err = cli(capsys, "hf", "export", str(a_run), "--out", str(hf))
    assert code == 0 and json.loads((hf / MARKER_FILE).read_text())["kind"] == "hf-checkpoint"
    code, err = cli(capsys, "hf", "export", str(a_run), "--out", str(hf))
    assert code == 2 and "add --force" in err[0]
    assert cli(capsys, "hf", "export", str(a_run), "--out", str(hf), "--force")[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "hf", "runs"]  # no stage left
    other = tmp_path / "runs" / "b"  # a run is not an export: --force leaves it alone
    train(config(steps=2), other, progress=False)
    before = tree(other)
    code, err = cli(capsys, "hf", "export", str(a_run), "--out", str(other), "--force")
    assert code == 2 and "--force replaces only an exported checkpoint depthlab wrote" in err[0]
    assert tree(other) == before


def test_a_run_from_before_the_marker_is_recognised_conservatively(tmp_path, a_run, capsys):
    (a_run / MARKER_FILE).unlink()
    assert survey(a_run).kind == RUN  # config.json of a depthlab run, only a trainer's files
    (a_run / "notes.txt").write_text("mine")
    assert survey(a_run).kind is None and "notes.txt" in survey(a_run).about
    (a_run / "notes.txt").unlink()
    (a_run / "checkpoints" / "mine").mkdir()
    assert survey(a_run).kind is None and "checkpoints/mine" in survey(a_run).about
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (foreign / "model.safetensors").write_bytes(b"x")
    assert survey(foreign).kind is None


# --- a refused command changes nothing ---------------------------------------------------

def test_a_refused_train_keeps_temporary_looking_user_files(tmp_path, capsys):
    out = tmp_path / "mine"
    (out / ".tmp-work").mkdir(parents=True)
    (out / ".tmp-work" / "draft.txt").write_text("keep")
    (out / ".notes.tmp").write_text("keep")
    (out / "paper.txt").write_text("keep")
    before = tree(out)
    for extra in ((), ("--overwrite",), ("--resume",)):
        code, err = cli(capsys, "train", "--preset", "tiny", "--corpus", TEXT, "--out", str(out),
                        "--steps", "2", "--no-progress", *extra)
        assert code == 2 and len(err) == 1, err
        assert tree(out) == before  # nothing removed, no lock, no marker


def test_a_run_depthlab_wrote_has_its_leftovers_removed(tmp_path, a_run, capsys):
    """What a killed write leaves, by the exact names depthlab's writes make: a temporary
    file of a file the run owns, a checkpoint stage holding only checkpoint files."""
    stage = a_run / "checkpoints" / ".tmp-k2j4h5g6"
    stage.mkdir()
    (stage / "model.safetensors").write_bytes(b"half")
    (stage / ".state.pt.ab12cd34.tmp").write_bytes(b"half")
    (a_run / ".config.json.ab12cd34.tmp").write_text("half")
    cfg = config(steps=2, ckpt_every=2)
    assert train(cfg, a_run, progress=False, resume=True).status == "completed"
    assert not stage.exists() and not (a_run / ".config.json.ab12cd34.tmp").exists()


USER_FILES = {  # names a pattern would have taken for depthlab's: each is someone's
    ".tmp-x/draft.txt": "a folder named like a checkpoint stage",
    ".notes.tmp": "a hidden .tmp file",
    ".config.json.draft.tmp": "a temporary-looking name of an own file, not mkstemp's",
    "checkpoints/.tmp-k2j4h5g6/notes.txt": "a stage holding a user file",
    "checkpoints/step_0000002/notes.txt": "a note inside a checkpoint folder",
    "checkpoints/step_0000002/.state.pt.ab12cd34.tmp": "a temporary inside a checkpoint",
}


@pytest.mark.parametrize("name", list(USER_FILES))
def test_overwrite_and_force_refuse_a_run_holding_a_user_file(tmp_path, a_run, hf_dir, name,
                                                              capsys):
    target = a_run / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("mine")
    before = tree(a_run)
    shown = name.split("/", 2)[0] if not name.startswith("checkpoints/") else name
    for argv in (["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(a_run),
                  "--overwrite", "--steps", "2", "--no-progress"],
                 ["hf", "import", str(hf_dir), "--out", str(a_run), "--force"]):
        code, err = cli(capsys, *argv)
        assert code == 2 and len(err) == 1, err
        assert f"but also {short(shown, 40)}" in err[0], err
        assert tree(a_run) == before
    # a resume keeps them too (the run is not one depthlab alone wrote: nothing is cleaned)
    if not name.startswith("checkpoints/step_"):
        assert train(config(steps=2, ckpt_every=2), a_run, progress=False,
                     resume=True).status == "completed"
        assert target.read_text() == "mine"


def test_pruning_keeps_a_note_in_an_old_checkpoint_folder(tmp_path):
    run = tmp_path / "run"
    train(config(steps=4, ckpt_every=1, keep_ckpts=1), run, progress=False, max_steps=2)
    note = run / "checkpoints" / "step_0000002" / "notes.txt"
    note.write_text("mine")
    assert train(config(steps=4, ckpt_every=1, keep_ckpts=1), run, progress=False,
                 resume=True).status == "completed"
    assert note.read_text() == "mine"  # its folder stays, the checkpoint files went
    assert sorted(p.name for p in note.parent.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_0000002",
                                                                       "step_0000004"]


def test_a_corpus_inside_out_is_refused_however_spelled(tmp_path, a_run, capsys):
    corpus = a_run / "checkpoints" / "step_0000002" / "text.txt"
    corpus.write_text(Path(TEXT).read_text())
    (tmp_path / "link").symlink_to(a_run)
    before = tree(a_run)
    for out, text in ((a_run, corpus), (tmp_path / "link", corpus),
                      (a_run, tmp_path / "link" / "checkpoints" / ".." / "checkpoints" /
                       "step_0000002" / "text.txt"),
                      (tmp_path / "link" / "checkpoints" / "..", corpus)):
        code, err = cli(capsys, "train", "--preset", "tiny", "--corpus", str(text), "--out",
                        str(out), "--overwrite", "--steps", "2", "--no-progress")
        assert code == 2 and len(err) == 1, err
        assert f"--corpus {text}: lies inside --out" in err[0], err
        assert tree(a_run) == before


def test_overwrite_through_dotdot_replaces_the_run_and_leaves_no_lock(tmp_path, a_run, capsys):
    (tmp_path / "link").symlink_to(a_run)
    out = tmp_path / "link" / "checkpoints" / ".."
    code, err = cli(capsys, "train", "--preset", "tiny", "--corpus", TEXT, "--out", str(out),
                    "--overwrite", "--steps", "2", "--no-progress",
                    "--set", "train.ckpt_every=2", "--seed", "5")
    assert code == 0, err
    assert read_config(a_run)[1]["seed"] == 5  # the new run, in the folder `out` named
    assert (a_run / "checkpoints" / "step_0000002").is_dir()
    assert not (a_run / ".lock").exists()


@pytest.mark.parametrize("kind", ["train", "import", "import-gguf", "export"])
def test_a_refusal_after_the_lock_leaves_no_folder_and_no_lock(tmp_path, kind, gguf_file,
                                                               capsys):
    out = tmp_path / "new" / "deeper" / "run"
    if kind == "train":  # the corpus is read after the lock is taken
        (tmp_path / "empty.txt").write_text("")
        argv = ["train", "--preset", "tiny", "--corpus", str(tmp_path / "empty.txt"), "--out",
                str(out), "--steps", "2", "--no-progress"]
    elif kind == "import":  # the tensors are matched to the model after the lock is taken
        from safetensors.torch import load_file, save_file

        hf = write_hf(tmp_path / "hf", BASE)
        state = load_file(str(hf / "model.safetensors"))
        del state["model.norm.weight"]
        save_file(state, str(hf / "model.safetensors"))
        argv = ["hf", "import", str(hf), "--out", str(out)]
    elif kind == "import-gguf":
        bad = tmp_path / "bad.gguf"
        write_tiny_gguf(bad, bad_tensor_type=True)
        argv = ["hf", "import-gguf", str(bad), "--out", str(out)]
    else:
        run = tmp_path / "run"
        train(config(steps=2), run, progress=False)
        (run / "model.safetensors").write_bytes(b"garbage")
        argv = ["hf", "export", str(run), "--out", str(out)]
    before = sorted(p.name for p in tmp_path.iterdir())
    code, err = cli(capsys, *argv)
    assert code == 2 and len(err) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no new/, no stage, no lock


@pytest.mark.parametrize("out", ["", "x" * 300, "/proc/self/x"])
@pytest.mark.parametrize("command", ["train", "import", "import-gguf", "export", "experiment"])
def test_a_bad_out_is_one_line_before_any_work(tmp_path, command, out, gguf_file, hf_dir,
                                               capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import depthlab.hf.convert as convert
    import depthlab.hf.gguf_import as gguf_import
    import depthlab.train.setup as setup

    def not_before_the_check(*a, **k):
        raise AssertionError("the work started before --out was checked")

    monkeypatch.setattr(convert, "model_from_hf_tensors", not_before_the_check)
    monkeypatch.setattr(gguf_import, "model_from_hf_tensors", not_before_the_check)
    monkeypatch.setattr(convert.rundir, "load_model", not_before_the_check)
    monkeypatch.setattr(setup, "prepare", not_before_the_check)
    argv = {"train": ["train", "--preset", "tiny", "--corpus", TEXT, "--no-progress"],
            "import": ["hf", "import", str(hf_dir)],
            "import-gguf": ["hf", "import-gguf", str(gguf_file)],
            "export": ["hf", "export", str(hf_dir)],
            "experiment": ["experiment", "residual", "--budget", "micro", "--no-progress"],
            }[command]
    if command == "export":  # an exportable run's config; its weights are never read
        write_config(tmp_path / "run", Config(model=ModelConfig(n_layers=2, d_model=32,
                                                                n_heads=4, vocab_size=50)))
        argv[2] = str(tmp_path / "run")
    code, err = cli(capsys, *argv, "--out", out)
    assert code == 2 and len(err) == 1, err
    assert "--out" in err[0] and len(err[0]) < 400
    assert sorted(p.name for p in tmp_path.iterdir()) == (["run"] if command == "export" else [])


def test_export_page_checks_its_folder_before_computing(tmp_path, capsys, monkeypatch):
    import depthlab.web.export as export

    def not_before_the_check(*a, **k):
        raise AssertionError("the page was computed before its folder was checked")

    monkeypatch.setattr(export, "page_data", not_before_the_check)
    for target in ("/proc/self/page", "", str(tmp_path / ("p" * 300))):
        code, err = cli(capsys, "export-page", target, "--grid", "small", "--no-progress")
        assert code == 2 and len(err) == 1 and "DIR" in err[0], err


def test_a_lock_file_goes_with_its_holder_and_is_taken_again(tmp_path):
    first = DirLock(tmp_path / "d").acquire()
    assert DirLock.holder(tmp_path / "d") == str(os.getpid())
    with pytest.raises(Exception, match="in use by process"):
        DirLock(tmp_path / "d").acquire()
    first.release()
    assert not (tmp_path / "d" / ".lock").exists() and DirLock.holder(tmp_path / "d") is None
    with DirLock(tmp_path / "d"):
        assert (tmp_path / "d" / ".lock").is_file()


def test_an_import_larger_than_the_free_disk_is_refused_before_writing(tmp_path, hf_dir, capsys,
                                                                       monkeypatch):
    import shutil

    import depthlab.outdir as outdir

    monkeypatch.setattr(outdir.shutil, "disk_usage",
                        lambda path: shutil._ntuple_diskusage(10 << 30, 10 << 30, 1000))
    code, err = cli(capsys, "hf", "import", str(hf_dir), "--out", str(tmp_path / "r"))
    assert code == 2 and len(err) == 1 and "the disk has 1000 B free" in err[0], err
    assert re.search(r"needs about \d+\.\d (KB|MB), ", err[0]), err  # never "0 MB"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("need, free, says", [
    (118_000, 50_000, "needs about 115.2 KB, the disk has 48.8 KB free"),
    (900, 0, "needs about 900 B, the disk has 0 B free"),
    (3 << 30, 5 << 20, "needs about 3.0 GB, the disk has 5.0 MB free"),
])
def test_the_space_a_write_needs_is_said_in_a_unit_that_fits(tmp_path, monkeypatch, need, free,
                                                            says):
    import shutil

    import depthlab.outdir as outdir

    monkeypatch.setattr(outdir.shutil, "disk_usage",
                        lambda path: shutil._ntuple_diskusage(10 << 30, 10 << 30, free))
    with pytest.raises(UserError) as e:
        outdir.check_space(tmp_path / "out", need)
    assert str(e.value) == f"--out {tmp_path / 'out'}: {says}; nothing was written"


def test_the_page_leaves_the_status_of_a_run_another_process_holds(tmp_path):
    from depthlab.web.runs import Runs

    folder = tmp_path / "residual"
    folder.mkdir()

    def page_run_gone() -> None:
        (folder / "status.json").write_text(json.dumps({"state": "running"}))
        # a run the page started, now gone (no process has this PID)
        (tmp_path / ".page-residual.job.json").write_text(json.dumps({"pid": 2 ** 30}))

    page_run_gone()
    Runs(tmp_path).settle_all()
    assert json.loads((folder / "status.json").read_text())["state"] == "interrupted"
    page_run_gone()
    with DirLock(folder, "experiment folder"):  # but another process runs the experiment now
        Runs(tmp_path).settle_all()
        assert json.loads((folder / "status.json").read_text())["state"] == "running"
    assert not (tmp_path / ".page-residual.job.json").exists()
