"""The trainer end to end on the tiny preset: learning, the metric log, exact resume,
signals, divergence and the CLI's one-line errors."""

import json
import os
import random
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
from depthlab.metrics import KINDS, read_metrics
from depthlab.rundir import load_model, load_weights, read_config
from depthlab.train import EXIT_DIVERGED, EXIT_INTERRUPTED, train
from depthlab.train.checkpoint import checkpoint_dirs


def weights_equal(a: Path, b: Path) -> bool:
    wa, wb = load_weights(a / "model.safetensors"), load_weights(b / "model.safetensors")
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_thirty_steps_learn_and_log_everything(tmp_path):
    summary = train(config(), tmp_path / "run", progress=False)
    assert summary.status == "completed" and summary.step == 30 and summary.exit_code == 0
    records = read_metrics(tmp_path / "run")
    assert {r["kind"] for r in records} == set(KINDS)
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    assert len(losses) == 30 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [0, 10, 20, 30]
    assert evals[-1]["val_loss"] < evals[0]["val_loss"]
    probes = [r for r in records if r["kind"] == "probe"]
    assert probes[0]["step"] == 0  # at init
    assert len(probes[0]["resid_rms"]) == 2 * 2 + 1 and len(probes[0]["grad_resid_pre"]) == 2
    assert records[-1] == {**records[-1], "kind": "run_end", "status": "completed", "step": 30}
    train_line = next(r for r in records if r["kind"] == "train")
    assert {"step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s"} <= set(train_line)
    # config.json reloads to the resolved config; vocab comes from the tokenizer
    cfg, record = read_config(tmp_path / "run")
    assert cfg == summary.config and cfg.model.vocab_size == record["tokenizer"]["vocab_size"]
    assert record["tokenizer"]["kind"] == "char" and record["seed"] == cfg.train.seed
    assert {"torch_version", "depthlab_version", "git_commit"} <= set(record)
    model, _ = load_model(tmp_path / "run")
    assert model.cfg == cfg.model
    assert len(checkpoint_dirs(tmp_path / "run")) == cfg.train.keep_ckpts


def test_reader_tolerates_a_truncated_line_and_unknown_keys(tmp_path):
    lines = [json.dumps({"kind": "train", "step": 1, "loss": 2.0, "new_key": 1}),
             '{"kind": "eval", "step": 1, "val_lo']
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines))
    assert read_metrics(tmp_path) == [{"kind": "train", "step": 1, "loss": 2.0, "new_key": 1}]


def test_overfits_one_batch(tmp_path):
    # 40 characters with val_fraction 0.25: the train split is exactly one 29-token window,
    # so every batch is the same batch.
    (tmp_path / "one.txt").write_text("the quick brown fox jumps over a lazy dog", encoding="utf-8")
    cfg = config(steps=150, seq_len=29, batch_size=4, lr=1e-2, warmup_steps=10,
                 min_lr_ratio=1.0, eval_every=150, probe_every=150, ckpt_every=150)
    cfg = replace(cfg, data=replace(cfg.data, corpus=str(tmp_path / "one.txt"), val_fraction=0.25))
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary.train_loss < 0.05


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_evaluating_and_probing_more_often_leaves_training_unchanged(tmp_path, optimizer):
    # bench/speedrun_preset.py evaluates the preset every 10 steps instead of its 50 to time
    # the target finely: that must not move a single weight of the run it times.
    sparse = config(steps=20, eval_every=20, probe_every=20, optimizer=optimizer)
    dense = config(steps=20, eval_every=1, probe_every=3, optimizer=optimizer)
    train(sparse, tmp_path / "sparse", progress=False)
    train(dense, tmp_path / "dense", progress=False)

    def losses(run):
        return [(r["step"], r["loss"]) for r in read_metrics(tmp_path / run) if r["kind"] == "train"]
    assert losses("dense") == losses("sparse") and len(losses("dense")) == 20
    assert weights_equal(tmp_path / "sparse", tmp_path / "dense")
    assert len([r for r in read_metrics(tmp_path / "dense") if r["kind"] == "eval"]) == 21


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])  # muon: both optimizers' state
def test_interrupted_and_resumed_run_is_bitwise_identical(tmp_path, optimizer):
    cfg = config(steps=80, ckpt_every=20, optimizer=optimizer)
    train(cfg, tmp_path / "full", progress=False)
    stop_at = random.Random().randint(5, 75)  # an arbitrary step

    def interrupt(step, _values):
        if step == stop_at:
            os.kill(os.getpid(), signal.SIGINT)

    first = train(cfg, tmp_path / "split", progress=False, on_step=interrupt)
    assert (first.status, first.step, first.exit_code) == ("interrupted", stop_at, EXIT_INTERRUPTED)
    resumed = train(cfg, tmp_path / "split", progress=False, resume=True)
    assert resumed.status == "completed" and resumed.step == 80
    assert weights_equal(tmp_path / "full", tmp_path / "split"), f"differs (stopped at {stop_at})"
    # the log holds each step once, and the same losses as the uninterrupted run
    log = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "split", "train")]
    assert log == [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "full", "train")]


def test_resume_ignores_a_half_written_checkpoint(tmp_path):
    cfg = config(steps=60, ckpt_every=20)
    train(cfg, tmp_path / "full", progress=False)
    crashed = train(cfg, tmp_path / "split", progress=False, max_steps=45)
    assert crashed.status == "interrupted"
    # a crash while writing checkpoint 50: a newer folder with a truncated state file
    # and a leftover temporary folder
    broken = tmp_path / "split" / "checkpoints" / "step_0000050"
    broken.mkdir()
    good = tmp_path / "split" / "checkpoints" / "step_0000045"
    (broken / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes())
    (broken / "state.pt").write_bytes((good / "state.pt").read_bytes()[:100])
    (tmp_path / "split" / "checkpoints" / ".tmp-crash").mkdir()
    resumed = train(cfg, tmp_path / "split", progress=False, resume=True)
    assert resumed.status == "completed"
    assert weights_equal(tmp_path / "full", tmp_path / "split")


def test_resume_refuses_a_different_schedule(tmp_path):
    train(config(steps=20), tmp_path / "run", progress=False, max_steps=10)
    with pytest.raises(Exception, match="train.steps"):
        train(config(steps=40), tmp_path / "run", progress=False, resume=True)
    with pytest.raises(Exception, match="--resume"):
        train(config(steps=20), tmp_path / "run", progress=False)


@pytest.mark.slow
def test_sigint_in_a_subprocess_saves_and_marks_interrupted(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "depthlab", "train", "--preset", "tiny", "--corpus", TEXT,
           "--steps", "100000", "--out", str(run), "--set", "train.log_every=1",
           "--set", "train.ckpt_every=100000", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and not read_metrics(run, "train"):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, err.decode()
    end = read_metrics(run)[-1]
    assert end["kind"] == "run_end" and end["status"] == "interrupted"
    assert checkpoint_dirs(run)[-1][0] == end["step"] > 0


def test_non_finite_loss_stops_with_exit_code_3(tmp_path):
    poisoned = {"on": False}

    def poison(t, _name):
        return t * float("inf") if poisoned["on"] else None

    def arm(step, _values):
        poisoned["on"] = step == 12

    cfg = config(ckpt_every=5)
    s = train(cfg, tmp_path / "run", progress=False, on_step=arm,
              fwd_hooks=[("blocks.0.hook_resid_post", poison)])
    assert s.status == "failed" and s.exit_code == EXIT_DIVERGED == 3
    assert "loss is nan at step 13" in s.message and "step_0000010" in s.message
    end = read_metrics(tmp_path / "run")[-1]
    assert end["status"] == "failed" and end["step"] == 12 and end["diverged"] is True
    assert checkpoint_dirs(tmp_path / "run")[-1][0] == 10


def test_off_cpu_the_loss_is_read_only_on_steps_that_need_it(tmp_path, monkeypatch):
    from depthlab.train import step_reads

    monkeypatch.setattr(step_reads, "read_every_step", lambda device: False)
    read_at = []
    real_read = step_reads.StepReads.read

    def spy(self, step, loss, grad_norm):
        read_at.append(step)
        return real_read(self, step, loss, grad_norm)

    monkeypatch.setattr(step_reads.StepReads, "read", spy)
    s = train(config(log_every=4, ckpt_every=5), tmp_path / "run", progress=False)
    assert s.status == "completed" and s.train_loss is not None
    # Dense early probes read steps 1-10; then logs (4), checkpoints (5), evals and
    # probes (10) and the last step.
    assert read_at == [*range(1, 11), 12, 15, 16, 20, 24, 25, 28, 30]
    logged = [r["step"] for r in read_metrics(tmp_path / "run", "train")]
    assert logged == [4, 8, 12, 16, 20, 24, 28, 30]


def test_off_cpu_divergence_is_caught_at_the_next_read_and_never_saved(tmp_path, monkeypatch):
    from depthlab.train import step_reads

    monkeypatch.setattr(step_reads, "read_every_step", lambda device: False)
    poisoned = {"on": False}

    def poison(t, _name):
        return t * float("inf") if poisoned["on"] else None

    def arm(step, _values):
        poisoned["on"] = step >= 12

    s = train(config(log_every=4, ckpt_every=5), tmp_path / "run", progress=False,
              on_step=arm, fwd_hooks=[("blocks.0.hook_resid_post", poison)])
    # Step 13 goes non-finite; step 15 (a checkpoint step) is the next read, and it
    # stops the run before that checkpoint is written.
    assert s.status == "failed" and s.exit_code == EXIT_DIVERGED
    assert "(read at step 15) went non-finite at step 13" in s.message
    assert "step_0000010" in s.message
    end = read_metrics(tmp_path / "run")[-1]
    assert end["status"] == "failed" and end["step"] == 12
    assert checkpoint_dirs(tmp_path / "run")[-1][0] == 10
    weights = load_weights(tmp_path / "run" / "model.safetensors")
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_cli_divergence_exit_code(tmp_path, capsys):
    code = main(["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(tmp_path / "r"),
                 "--set", "model.init_std=1e30", "--no-progress"])
    assert code == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("depthlab: error:") and "at step" in err[-1]


@pytest.mark.parametrize("argv, phrase", [
    (["--steps", "many"], "invalid int value"),
    (["--tokenizer", "words"], "invalid choice"),
    (["--set", "train.stepz=3"], "train.steps"),
    (["--set", "train.lr=-1"], "train.lr"),
    (["--corpus", "no/such/file.txt"], "no/such/file.txt"),
])
def test_bad_flags_are_one_line_errors(tmp_path, capsys, argv, phrase):
    try:
        code = main(["train", "--preset", "tiny", "--out", str(tmp_path / "r"), *argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and phrase in err and len(err.splitlines()) == 1


def test_binary_corpus_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\x00\xff" * 100)
    assert main(["train", "--preset", "tiny", "--corpus", str(bad),
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert str(bad) in err and len(err.splitlines()) == 1
