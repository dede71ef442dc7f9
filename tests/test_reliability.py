"""Nothing lost, nothing wrong, nobody else in: run-directory locks, resume over damaged
checkpoints, leftovers of killed writes, experiments keyed by config hash, the
divergence message, and inputs that are too big or the wrong shape."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from train_helpers import DATA, REPO, TEXT, cache, config  # noqa: F401 (cache: autouse fixture)

from depthlab.cli import main
from depthlab.errors import UserError
from depthlab.experiments import run_experiment
from depthlab.memory import check_fits, estimate
from depthlab.metrics import read_metrics
from depthlab.model.summary import summarize
from depthlab.presets import get_preset, tiny
from depthlab.rundir import DirLock, config_hash, read_config
from depthlab.train import EXIT_DIVERGED, train
from depthlab.train.checkpoint import checkpoint_dirs, load_latest
from depthlab.train.step import optimizer_step


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under root (the lock file aside: it holds the last PID)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


def cli(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err.strip()


# --- one process per run directory -----------------------------------------------------

def test_a_held_run_directory_refuses_a_second_trainer_naming_the_pid(tmp_path, capsys):
    run = tmp_path / "run"
    with DirLock(run):
        code, err = cli(["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(run),
                         "--steps", "2", "--no-progress"], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert f"in use by process {os.getpid()}" in err
    assert list(run.iterdir()) == []  # nothing was written; the lock file went with its holder
    # the lock went with its holder: the same command now runs
    code, _ = cli(["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(run),
                   "--steps", "2", "--no-progress"], capsys)
    assert code == 0


@pytest.mark.slow
def test_two_real_trainers_on_one_directory(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    base = [sys.executable, "-m", "depthlab", "train", "--preset", "tiny", "--corpus", TEXT,
            "--out", str(run), "--no-progress", "--set", "train.ckpt_every=100000"]
    first = subprocess.Popen([*base, "--steps", "100000", "--seed", "1"], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not read_metrics(run, "train"):
            time.sleep(0.2)
        second = subprocess.run([*base, "--steps", "5", "--seed", "2"], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip() == (
            f"depthlab: error: {run}: this run directory is in use by process {first.pid}; "
            "wait for it to finish or stop it")
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert first.returncode == 130
    _, record = read_config(run)
    assert record["seed"] == 1  # the second trainer wrote nothing


def test_a_second_experiment_into_the_same_out_is_refused(tmp_path):
    with DirLock(tmp_path / "residual"), pytest.raises(UserError, match=f"process {os.getpid()}"):
        run_experiment("residual", budget="micro", out_dir=tmp_path, corpus=TEXT,
                       progress=False, echo=False)


@pytest.mark.parametrize("out", ["file", "/dev/null/run"])
def test_out_that_cannot_be_a_directory(tmp_path, capsys, out):
    if out == "file":
        out = tmp_path / "file"
        out.write_text("keep me")
    code, err = cli(["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(out)], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and f"--out {out}" in err
    if isinstance(out, Path):
        assert out.read_text() == "keep me"


# --- resume never loses work -----------------------------------------------------------

def damage(run: Path) -> None:
    for _, path in checkpoint_dirs(run):
        (path / "state.pt").write_bytes(b"not a checkpoint")


def test_resume_over_damaged_checkpoints_refuses_and_changes_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    train(config(steps=20, ckpt_every=5), run, progress=False)
    damage(run)
    before = tree_hashes(run)
    code, err = cli(["train", "--config", str(run / "config.json"), "--out", str(run),
                     "--resume", "--no-progress"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "no readable checkpoint" in err
    for _, path in checkpoint_dirs(run):
        assert str(path / "state.pt") in err
    assert tree_hashes(run) == before  # weights, log and config untouched


def _moments_of_another_shape(s: dict) -> None:
    s["optimizer"]["state"] = {0: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(2),
                                   "exp_avg_sq": torch.zeros(2)}}


def _no_groups(s: dict) -> None:
    s["optimizer"]["param_groups"] = []


@pytest.mark.parametrize(("spoil", "says"), [
    (_moments_of_another_shape, "exp_avg of parameter 0 is (2,)"),  # reached a fused kernel: SIGSEGV
    (lambda s: s.update(optimizer={}), "not an optimizer state"),
    (lambda s: s.pop("optimizer"), "not an optimizer state"),
    (_no_groups, "0 parameters in 0 groups"),
    (lambda s: s.update(torch_rng=torch.zeros(3)), "torch_rng is not a byte tensor"),
    (lambda s: s.update(torch_rng="abc"), "torch_rng is not a byte tensor")])
def test_a_readable_state_that_does_not_fit_is_a_one_line_error(tmp_path, capsys, spoil, says):
    # state.pt loads (right step) but its optimizer state or RNG cannot be this run's: a
    # one-line refusal naming the file, before anything is loaded, and nothing written
    run = tmp_path / "run"
    train(config(steps=6, ckpt_every=3), run, progress=False, max_steps=3)  # stopped at 3
    newest = checkpoint_dirs(run)[-1][1] / "state.pt"
    state = torch.load(newest, weights_only=True)
    spoil(state)
    torch.save(state, newest)
    before = tree_hashes(run)
    code, err = cli(["train", "--config", str(run / "config.json"), "--out", str(run),
                     "--resume", "--no-progress"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"depthlab: error: {newest}: does not fit this run") and says in err, err
    assert tree_hashes(run) == before


def test_a_fresh_run_refuses_a_non_empty_directory_and_overwrite_only_replaces_a_run(
        tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    argv = ["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(run), "--steps", "3",
            "--no-progress"]
    code, err = cli(argv, capsys)
    assert code == 2 and "is not empty (notes.txt)" in err and "--overwrite" in err
    code, err = cli([*argv, "--resume"], capsys)
    assert code == 2 and "no config.json" in err
    code, err = cli([*argv, "--overwrite"], capsys)  # notes.txt is not a run depthlab wrote
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "holds notes.txt, which depthlab did not write" in err and "nothing was changed" in err
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]  # and no lock left behind
    (run / "notes.txt").unlink()
    code, _ = cli(argv, capsys)
    assert code == 0 and read_metrics(run, "run_end")[-1]["status"] == "completed"
    code, err = cli(argv, capsys)  # and now it holds a run
    assert code == 2 and "already holds a run" in err
    first = read_config(run)[1]["corpus"]
    code, _ = cli([*argv, "--overwrite", "--seed", "7"], capsys)  # a run depthlab wrote: replaced
    assert code == 0 and read_config(run)[1]["seed"] == 7 and read_config(run)[1]["corpus"] == first


def test_a_damaged_newer_checkpoint_never_prunes_the_good_one(tmp_path):
    run = tmp_path / "run"
    cfg = config(steps=60, ckpt_every=10, keep_ckpts=1)
    train(cfg, run, progress=False, max_steps=20)
    bogus = run / "checkpoints" / "step_0000090"
    bogus.mkdir()
    (bogus / "model.safetensors").write_bytes(b"garbage")
    resumed = train(cfg, run, progress=False, resume=True, max_steps=15)
    assert resumed.status == "interrupted" and resumed.step == 35
    ckpt, damaged = load_latest(run)
    assert ckpt is not None and ckpt.step == 35  # the newest readable one survived pruning
    assert [s for s, _ in checkpoint_dirs(run)] == [35, 90] and "step_0000090" in damaged[0]


def test_leftovers_of_a_killed_write_are_removed_at_the_next_start(tmp_path, capsys):
    run = tmp_path / "run"
    cfg = config(steps=20, ckpt_every=5)
    train(cfg, run, progress=False, max_steps=10)
    # the names mkdtemp and mkstemp make (8 random characters): depthlab's own, exactly
    leftovers = [run / "checkpoints" / ".tmp-abc12345", run / "checkpoints" / ".tmp-def_6789"]
    for folder in leftovers:
        folder.mkdir()
        (folder / "state.pt").write_bytes(b"half")
    stray = run / ".model.safetensors.x1y2z3w4.tmp"
    stray.write_bytes(b"half")
    capsys.readouterr()
    assert train(cfg, run, progress=False, resume=True).status == "completed"
    assert "removed 3 leftover" in capsys.readouterr().err
    assert not any(p.exists() for p in [*leftovers, stray])


def test_a_finished_run_resumed_again_changes_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(run), "--steps", "6",
            "--no-progress", "--json"]
    assert cli(argv, capsys)[0] == 0
    before = tree_hashes(run)
    code = main([*argv, "--resume"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["status"] == "completed" and "already finished" in out["message"]
    assert out["val_loss"] == read_metrics(run, "eval")[-1]["val_loss"]
    assert tree_hashes(run) == before
    assert len(read_metrics(run, "run_end")) == 1


def test_resume_and_overwrite_together_are_refused(tmp_path, capsys):
    code, err = cli(["train", "--preset", "tiny", "--out", str(tmp_path), "--resume",
                     "--overwrite"], capsys)
    assert code == 2 and "not both" in err


# --- the divergence message tells what is on disk --------------------------------------

def poisoned_run(run: Path, at: int, **train_cfg):
    armed = {"on": False}

    def poison(t, _name):
        return t * float("inf") if armed["on"] else None

    def arm(step, _values):
        armed["on"] = step == at

    return train(config(**train_cfg), run, progress=False, on_step=arm,
                 fwd_hooks=[("blocks.0.hook_resid_post", poison)])


def test_divergence_before_any_checkpoint_says_nothing_saved(tmp_path):
    s = poisoned_run(tmp_path / "run", at=3, ckpt_every=10)
    assert s.exit_code == EXIT_DIVERGED
    assert "at step 4" in s.message and "nothing saved" in s.message
    assert not checkpoint_dirs(tmp_path / "run")


def test_divergence_names_the_step_of_the_weights_on_disk(tmp_path):
    s = poisoned_run(tmp_path / "run", at=8, ckpt_every=5)
    assert s.exit_code == EXIT_DIVERGED
    assert "at step 9" in s.message and "those of step 5" in s.message
    assert checkpoint_dirs(tmp_path / "run")[-1][0] == 5


def test_overflow_inside_the_optimizer_is_divergence():
    w = torch.nn.Parameter(torch.ones(3))
    w.grad = torch.ones(3)
    assert optimizer_step(torch.optim.AdamW([w], lr=1e-3)) is None
    w.grad = torch.ones(3)
    message = optimizer_step(torch.optim.AdamW([w], lr=1e38))  # step size 1e39 > float max
    assert message is not None and "overflowed" in message


# --- experiments know what they reuse ---------------------------------------------------

@pytest.mark.slow
def test_an_experiment_refuses_runs_of_another_corpus_and_reruns_them(tmp_path):
    other = tmp_path / "other.txt"
    other.write_text(Path(TEXT).read_text(encoding="utf-8")[::-1], encoding="utf-8")
    run_experiment("residual", budget="micro", out_dir=tmp_path, corpus=TEXT, progress=False,
                   echo=False)
    export = tmp_path / "residual" / "export.json"
    before = export.read_text()
    with pytest.raises(UserError, match=r"data.corpus .*--rerun"):
        run_experiment("residual", budget="micro", out_dir=tmp_path, corpus=str(other),
                       progress=False, echo=False)
    assert export.read_text() == before  # nothing served from the other config
    run_experiment("residual", budget="micro", out_dir=tmp_path, corpus=str(other),
                   progress=False, echo=False, rerun=True)
    runs = sorted((tmp_path / "residual" / "runs").iterdir())
    for run in runs:
        cfg, record = read_config(run)
        assert cfg.data.corpus == str(other) and record["config_sha256"] == config_hash(cfg)
        assert len(read_metrics(run, "run_start")) == 1  # trained afresh, not resumed
    record = json.loads((tmp_path / "residual" / "experiment.json").read_text())
    assert record["corpus"] == str(other) and set(record["runs"]) == {r.name for r in runs}
    assert export.read_text() != before


def test_config_hash_ignores_where_a_run_executes_and_the_tokenizer_vocab():
    cfg = tiny()
    moved = replace(cfg, train=replace(cfg.train, device="cpu", threads=3),
                    model=replace(cfg.model, vocab_size=65))
    assert config_hash(moved) == config_hash(cfg)
    assert config_hash(replace(cfg, train=replace(cfg.train, seed=2))) != config_hash(cfg)


# --- sizes and shapes ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["course", "tiny", "llama", "gpt2", "qwen3"])
def test_parameter_estimate_matches_the_model(name):
    m = get_preset(name).model
    assert abs(m.approx_params / summarize(m).total_params - 1) < 0.01


WIDE = [{"residual": "rezero"}, {"residual": "attnres"}, {"residual": "hc", "streams": 1},
        {"residual": "hc", "streams": 5}, {"residual": "mhc", "streams": 3},
        {"residual": "mhc", "streams": 16}]


@pytest.mark.parametrize("changes", WIDE, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_residual_parameters_per_write_are_the_built_models(changes):
    from depthlab.config import residual_params_per_write
    from depthlab.model import Transformer

    m = replace(get_preset("course").model, vocab_size=64, d_model=48, n_heads=4, **changes)
    model = Transformer(m)
    learned = sum(p.numel() for name, p in model.named_parameters() if "_residual." in name)
    assert learned == m.n_writes * residual_params_per_write(m.residual, m.d_model, m.streams)
    assert abs(m.approx_params / summarize(m).total_params - 1) < 0.01


PEAK = """
import sys
import torch
import torch.nn.functional as F
torch.set_num_threads(1)
from depthlab.presets import get_preset
from depthlab.model import Transformer
from depthlab.train.optim import make_optimizer
import dataclasses, json
cfg = get_preset(sys.argv[1]); tc = cfg.train
cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **json.loads(sys.argv[2])))
import os
base = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
model = Transformer(cfg.model); opt = make_optimizer(model, tc)
x = torch.randint(0, cfg.model.vocab_size, (tc.batch_size, tc.seq_len + 1))
for _ in range(2):
    loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
# VmHWM, not ru_maxrss: exec keeps the parent's ru_maxrss (a pytest process that loaded a
# large model would set the floor), while VmHWM belongs to this process's own memory map.
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print((hwm - base) * 1024)
"""


@pytest.mark.parametrize("name,changes", [
    ("course", {}), ("gpt2", {}), ("course", {"residual": "hc", "streams": 8}),
    ("course", {"residual": "mhc", "streams": 16}), ("course", {"residual": "attnres"}),
    ("qwen3_5", {}), ("qwen3_5", {"layer_pattern": None})])
@pytest.mark.slow
def test_memory_estimate_is_within_a_factor_of_the_measured_peak(name, changes):
    """Within 2x of the peak for every residual: hc/mhc's n copies of the stream and
    attnres's history are counted (without them mhc at 16 streams read 0.2x)."""
    cfg = get_preset(name)
    cfg = replace(cfg, model=replace(cfg.model, **changes))
    est = estimate(cfg.model, cfg.train.batch_size, cfg.train.seq_len, training=True)
    assert est.weights == 4 * cfg.model.approx_params and est.optimizer == 3 * est.weights
    out = subprocess.run([sys.executable, "-c", PEAK, name, json.dumps(changes)], cwd=REPO,
                         capture_output=True,
                         text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    peak = int(out.stdout.strip())
    assert 0.5 < est.total / peak < 2.0, (est.total, peak)


@pytest.mark.parametrize("setting", ["model.vocab_size=1000000000", "train.batch_size=1000000000"])
def test_sizes_that_cannot_fit_are_refused_with_the_estimate(setting):
    cfg = get_preset("course")
    from depthlab.config import apply_overrides

    with pytest.raises(UserError, match=r"needs about .* but .* is free"):
        check_fits(apply_overrides(cfg, [f"{setting}"]))


def test_rope_tables_for_a_huge_context_are_counted():
    """RoPE's cos, sin tables cover model.context_len positions whatever train.seq_len is:
    a context of 10^9 tokens needs about 1 TB to build them, refused before allocating."""
    cfg = get_preset("course")
    from depthlab.config import apply_overrides

    huge = apply_overrides(cfg, ["model.context_len=1000000000"])
    for training in (True, False):
        with pytest.raises(UserError, match=r"needs about .* but .* is free"):
            check_fits(huge, training=training)
    gap = estimate(huge.model, 1, 8, False).total - estimate(cfg.model, 1, 8, False).total
    assert gap == 4 * 8 * (10**9 - 256) * cfg.model.head_size
    learned = apply_overrides(huge, ["model.position=learned"])  # no tables; its table of
    assert estimate(learned.model, 1, 8, False).activations < 10**6  # positions is weights


def test_inference_is_checked_for_the_tokens_it_runs_not_the_whole_context():
    """A model with a long context (here 2^20 positions of RoPE) loads and reads a short
    prompt; its attention over a full context would not fit, and a job that long is still
    refused."""
    from depthlab.config import apply_overrides

    long = apply_overrides(get_preset("course"), ["model.context_len=1048576"])
    assert check_fits(long, training=False).total < 2 * 2**30  # weights and RoPE tables
    check_fits(long, training=False, seq=5)
    with pytest.raises(UserError, match=r"inference needs about"):
        check_fits(long, training=False, seq=2**20)


def test_a_run_with_a_long_context_generates_and_is_probed(tmp_path, capsys):
    run = tmp_path / "run"
    train(config(steps=2, ckpt_every=2), run, progress=False)
    record = json.loads((run / "config.json").read_text())
    assert record["config"]["model"]["position"] == "rope"
    record["config"]["model"]["context_len"] = 1048576
    (run / "config.json").write_text(json.dumps(record))
    code, err = cli(["generate", "--run", str(run), "--prompt", "ROMEO:", "--tokens", "3",
                     "--greedy"], capsys)
    assert code == 0, err
    code, err = cli(["probe", "run", str(run), "--prompt", "ROMEO:", "--json"], capsys)
    assert code == 0, err


def test_resume_refuses_an_edited_corpus(tmp_path, capsys):
    """The text is read again on --resume; an edited file (other characters, so other
    token ids) is refused by name before anything is written, and the original resumes."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(Path(TEXT).read_text(encoding="utf-8"), encoding="utf-8")
    argv = ["train", "--preset", "tiny", "--corpus", str(corpus), "--out", str(tmp_path / "run"),
            "--no-progress"]
    assert cli([*argv, "--max-steps", "4"], capsys)[0] == 130  # stopped, resumable
    before = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    corpus.write_text(corpus.read_text(encoding="utf-8").replace("Z", "~"), encoding="utf-8")
    code, err = cli([*argv, "--resume"], capsys)
    assert code == 2 and "--resume needs the corpus the run was trained on" in err
    assert {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == before
    corpus.write_text(Path(TEXT).read_text(encoding="utf-8"), encoding="utf-8")
    assert cli([*argv, "--resume", "--max-steps", "6"], capsys)[0] == 130


def _set_recorded_text(value: object):
    def edit(record: dict) -> None:
        if value is ...:
            del record["corpus"]["sha256"]
        elif value == "the edited text's":
            text = (Path(record["config"]["data"]["corpus"])).read_text(encoding="utf-8")
            record["corpus"]["sha256"] = hashlib.sha256(text.encode()).hexdigest()
        else:
            record["corpus"]["sha256"] = value
    return edit


EDITED_RECORDS = {  # config.json edited beside an edited corpus: (edit, what the line says)
    "hash-5": (_set_recorded_text("5"), 'field corpus.sha256 is "5", not a sha256'),
    "hash-removed": (_set_recorded_text(...), "field corpus.sha256 is missing"),
    "hash-null": (_set_recorded_text(None), "field corpus.sha256 is missing"),
    "hash-upper-case": (_set_recorded_text("A" * 64), "not a sha256 (64 hex digits)"),
    "corpus-record-removed": (lambda r: r.pop("corpus"), "field corpus.sha256 is missing"),
    "hash-of-the-edited-text": (_set_recorded_text("the edited text's"),
                                "/state.pt was trained on the text"),
}


@pytest.mark.parametrize("name", list(EDITED_RECORDS))
def test_resume_checks_the_text_from_what_the_run_saved_beside_its_weights(tmp_path, capsys,
                                                                          name):
    """config.json is an editable file: a hash edited to match the new text, removed or
    malformed never lets a resume train on another text. The checkpoint carries the
    text's hash; a missing or malformed field is refused in one line naming it."""
    edit, says = EDITED_RECORDS[name]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(Path(TEXT).read_text(encoding="utf-8"), encoding="utf-8")
    run = tmp_path / "run"
    assert cli(["train", "--preset", "tiny", "--corpus", str(corpus), "--out", str(run),
                "--no-progress", "--max-steps", "4"], capsys)[0] == 130
    # the same characters in another order: the same vocabulary, other token ids
    corpus.write_text(corpus.read_text(encoding="utf-8").replace("the", "teh"), encoding="utf-8")
    record = json.loads((run / "config.json").read_text())
    edit(record)
    (run / "config.json").write_text(json.dumps(record))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code, err = cli(["train", "--config", str(run / "config.json"), "--out", str(run),
                     "--resume", "--no-progress"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert says in err and ("config.json: field corpus.sha256" in err), err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_resume_refuses_a_tokenizer_json_that_is_not_the_runs(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(run), "--no-progress"]
    assert cli([*argv, "--max-steps", "4"], capsys)[0] == 130
    tok = json.loads((run / "tokenizer.json").read_text())
    tok["chars"][0], tok["chars"][1] = tok["chars"][1], tok["chars"][0]
    (run / "tokenizer.json").write_text(json.dumps(tok))
    code, err = cli([*argv, "--resume"], capsys)
    assert code == 2 and err.strip() == (
        f"depthlab: error: {run / 'tokenizer.json'}: does not map the tokens the corpus "
        "gives; nothing was changed. Restore it, or pass --overwrite to start over")
    (run / "tokenizer.json").unlink()
    code, err = cli([*argv, "--resume"], capsys)
    assert code == 2 and f"{run / 'tokenizer.json'}: missing" in err


def test_a_stop_between_log_steps_keeps_the_cpu_seconds_of_the_steps_before_it(tmp_path,
                                                                              monkeypatch):
    """cpu_s on a train line counts the steps since the previous line, and the sum of cpu_s
    up to a step is the CPU time to reach it (the speedrun adds them). A stop at step 7
    with a line every 10 steps left steps 1-7 uncounted; the checkpoint now carries them.
    The process clock is replaced by one that moves 1 s per reading, two per step."""
    import depthlab.train.loop as loop

    clock = iter(range(10**6))
    monkeypatch.setattr(loop.time, "process_time", lambda: float(next(clock)))
    cfg = config(steps=10, log_every=10, ckpt_every=100, eval_every=100, probe_every=100)

    def cpu_at_10(run: Path) -> float:
        return next(r["cpu_s"] for r in read_metrics(run) if r["kind"] == "train" and r["step"] == 10)
    train(cfg, tmp_path / "whole", progress=False)
    train(cfg, tmp_path / "stopped", progress=False, max_steps=7)
    train(cfg, tmp_path / "stopped", resume=True, progress=False)
    assert cpu_at_10(tmp_path / "whole") == cpu_at_10(tmp_path / "stopped") == 10.0


def test_a_resume_on_another_thread_count_says_so(tmp_path, capsys, monkeypatch):
    """config.json records the threads a run trained on; a resume on another count (its
    CPU sums split another way) is not bit for bit the uninterrupted run, and says so."""
    import depthlab.train.setup as setup

    argv = ["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(tmp_path / "run"),
            "--no-progress"]
    assert cli([*argv, "--max-steps", "3"], capsys)[0] == 130
    was = json.loads((tmp_path / "run" / "config.json").read_text())["threads_used"]
    assert was == torch.get_num_threads()
    code, err = cli([*argv, "--resume", "--max-steps", "5"], capsys)
    assert code == 130 and "resumes on" not in err
    monkeypatch.setattr(setup.torch, "get_num_threads", lambda: was + 1)
    code, err = cli([*argv, "--resume", "--max-steps", "7"], capsys)
    assert code == 130
    assert f"trained on {was} thread(s) and resumes on {was + 1}" in err


def edited_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    train(config(steps=4, ckpt_every=2), run, progress=False)
    record = json.loads((run / "config.json").read_text())
    record["config"]["model"]["d_model"] = 64
    (run / "config.json").write_text(json.dumps(record))
    return run


def test_a_run_edited_to_another_shape_names_the_tensor_and_both_shapes(tmp_path, capsys):
    run = edited_run(tmp_path)
    code, err = cli(["generate", "--run", str(run), "--prompt", "ROMEO:", "--tokens", "3"], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert "tensor embed_tokens.weight has shape [" in err and ", 32] in the file" in err
    assert ", 64]" in err
    code, err = cli(["train", "--config", str(run / "config.json"), "--out", str(run),
                     "--resume", "--no-progress"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "has shape" in err and "64]" in err


@pytest.mark.slow
def test_under_torchrun_rank0_holds_the_lock_and_both_ranks_refuse(tmp_path):
    from test_train_dist import free_port

    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DEPTHLAB_CACHE": str(tmp_path / "cache")}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "depthlab"]
    argv = ["train", "--preset", "tiny", "--corpus", TEXT, "--steps", "4", "--no-progress",
            "--out", str(run)]
    with DirLock(run):
        held = subprocess.run([*launcher, *argv], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=180)
    assert held.returncode != 0
    assert f"in use by process {os.getpid()}" in held.stderr
    assert list(run.iterdir()) == []
    free = subprocess.run([*launcher, *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180)
    assert free.returncode == 0, free.stderr[-3000:]
    assert read_metrics(run, "run_end")[-1]["status"] == "completed"


def test_fields_added_later_keep_old_hashes_at_their_old_value_and_count_otherwise():
    from dataclasses import replace

    from depthlab.rundir import ADDED_FIELDS

    cfg = get_preset("course")
    # the course config's hash, computed on main before these fields existed
    assert config_hash(cfg) == "e7e3e78d29b83a39971f11616482139662d8030ff2edb8d3d178c7c74a750978"
    for key, old in ADDED_FIELDS.items():
        section, field = key.split(".")
        assert getattr(getattr(cfg, section), field) == old
    changed = replace(cfg, model=replace(cfg.model, value_residual=True))
    assert config_hash(changed) != config_hash(cfg)


def test_a_runs_files_have_the_mode_open_would_give_them(tmp_path):
    """mkstemp and mkdtemp make 0600 files and 0700 folders; a run directory (weights,
    config, tokenizer, checkpoints) is no secret: every file and folder gets the umask's
    mode, as metrics.jsonl, written by open(), always had."""
    import stat

    from depthlab.atomic import DIR_MODE, FILE_MODE

    train(config(steps=2, ckpt_every=1), tmp_path / "run", progress=False)
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in (tmp_path / "run").rglob("*") if p.name != ".lock"}
    from depthlab.train.checkpoint import STATE_FILE
    assert any(k.endswith(f"step_0000002/{STATE_FILE}") for k in modes)
    assert {k: v for k, v in modes.items()
            if v != (DIR_MODE if (tmp_path / k).is_dir() else FILE_MODE)} == {}


SIGTERM_BEFORE_THE_FIRST_STEP = """
import os, signal, sys
import depthlab.train.setup as setup
real = setup.prepare_data
def terminated(*a, **k):  # the signal arrives while the corpus is being read
    os.kill(os.getpid(), signal.SIGTERM)
    return real(*a, **k)
setup.prepare_data = terminated
from depthlab.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_before_the_first_step_is_a_clean_interrupt(tmp_path):
    """SIGTERM during start-up was the default action: exit 143, no message, an --out
    holding only its lock. It is now Ctrl-C's: one line, exit 130, nothing left."""
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", SIGTERM_BEFORE_THE_FIRST_STEP, "train",
                           "--preset", "tiny", "--corpus", TEXT, "--out", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "depthlab: interrupted"
    assert not out.exists()


def test_a_resume_that_stops_before_evaluating_reports_the_last_evaluation(tmp_path):
    """The summary's val loss was None (printed '-') when a resumed run stopped before
    its own first evaluation; it is the log's last one, as for a finished run."""
    cfg = config(steps=10, eval_every=3, ckpt_every=100, probe_every=100)
    train(cfg, tmp_path / "run", progress=False, max_steps=3)
    evals = read_metrics(tmp_path / "run", "eval")
    assert [r["step"] for r in evals][-1] == 3
    summary = train(cfg, tmp_path / "run", resume=True, progress=False, max_steps=1)
    assert summary.step == 4 and summary.val_loss == evals[-1]["val_loss"]
