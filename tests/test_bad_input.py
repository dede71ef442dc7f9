"""The rules behind the one-line refusals of tests/test_cli_fuzz.py, checked exactly:
the smallest corpus a split and a context allow, the thread rule and its bound,
optimizer and schedule ranges, strict JSON types, and what a hard stop or a failed
write says is on disk."""

import errno
from dataclasses import replace

import pytest

from depthlab.cli import main
from depthlab.config import Config, apply_overrides
from depthlab.errors import ConfigError, UserError
from depthlab.presets import tiny
from depthlab.threads import auto_threads, check_threads, usable_cores
from depthlab.train import stop as stop_mod
from depthlab.train import train
from depthlab.train.checkpoint import checkpoint_dirs
from depthlab.train.setup import min_corpus_tokens
from tests.train_helpers import TEXT


def _fits(n: int, seq_len: int, val_fraction: float) -> bool:
    """The split of depthlab.tokenizer (the last max(1, floor(n * f)) tokens are
    validation) leaves a training window plus its target and 2 validation tokens."""
    n_val = max(1, int(n * val_fraction))
    return n_val >= 2 and n - n_val >= seq_len + 1


@pytest.mark.parametrize("val_fraction", [0.01, 0.05, 0.1, 0.3, 0.49])
def test_min_corpus_tokens_is_the_smallest_that_fits(val_fraction):
    for seq_len in range(1, 300, 7):
        need = min_corpus_tokens(seq_len, val_fraction)
        assert _fits(need, seq_len, val_fraction)
        assert not any(_fits(n, seq_len, val_fraction) for n in range(1, need))


def test_the_thread_rule():
    assert auto_threads(128, cores=16, load=0.0) == 1  # lesson-sized: one thread
    assert auto_threads(256, cores=16, load=0.0) == 1
    assert auto_threads(576, cores=8, load=0.2) == 8  # wide, idle machine: every core
    assert auto_threads(576, cores=4, load=1.9) == 3  # one core busy elsewhere
    assert auto_threads(576, cores=2, load=5.3) == 1  # busy machine: one, never zero
    assert auto_threads(576, world=2, cores=16, load=0.0) == 1  # torchrun: one per process
    assert auto_threads(None, cores=6, load=0.0) == 6  # unknown width counts as wide
    # training a wide model: every core whatever the load, so a run repeats bitwise
    assert auto_threads(576, cores=4, load=3.7, training=True) == 4
    assert auto_threads(128, cores=4, load=0.0, training=True) == 1
    assert auto_threads(576, world=2, cores=4, load=0.0, training=True) == 1


def test_threads_are_bounded_by_the_usable_cores():
    cores = usable_cores()
    assert check_threads(0) == 0 and check_threads(cores) == cores
    for bad in (cores + 1, -1, 10**6):
        with pytest.raises(UserError, match=f"between 1 and {cores}"):
            check_threads(bad)


@pytest.mark.parametrize("setting", ["train.beta1=0", "train.min_lr_ratio=0",
                                     "train.min_lr_ratio=1", "train.beta2=0.999999",
                                     "train.grad_clip=0", "train.weight_decay=0",
                                     "train.grad_accum=1024"])
def test_the_ends_of_each_range_that_mean_something_are_allowed(setting):
    apply_overrides(tiny(), [setting])


@pytest.mark.parametrize("setting, field", [
    ("train.beta1=1", "train.beta1"), ("train.beta2=0", "train.beta2"),
    ("train.min_lr_ratio=1.0001", "train.min_lr_ratio"), ("train.min_lr_ratio=-1e-9",
                                                           "train.min_lr_ratio"),
])
def test_out_of_range_names_the_field_and_the_range(setting, field):
    with pytest.raises(ConfigError, match=rf"^{field} must be in [\[(]"):
        apply_overrides(tiny(), [setting])


def test_gradient_accumulation_is_bounded():
    """A million micro-batches made step 1 run for hours, and a stop waits for the step."""
    with pytest.raises(ConfigError, match=r"^train.grad_accum must be at most 1024, got 1025"):
        apply_overrides(tiny(), ["train.grad_accum=1025"])


def test_weight_decay_is_bounded_by_the_learning_rate():
    apply_overrides(tiny(), ["train.lr=0.5", "train.weight_decay=1.99"])
    with pytest.raises(ConfigError, match="train.weight_decay must be below 1 / train.lr = 2"):
        apply_overrides(tiny(), ["train.lr=0.5", "train.weight_decay=2"])


@pytest.mark.parametrize("raw, text", [
    ({"train": {"lr": "0.1"}}, "train.lr=0.1"),
    ({"model": {"qk_norm": "yes"}}, "model.qk_norm=yes"),
    ({"train": {"steps": "7"}}, "train.steps=7"),
    ({"model": {"head_dim": "null"}}, "model.head_dim=null"),
])
def test_config_files_are_typed_strictly_and_flags_parse_text(raw, text):
    with pytest.raises(ConfigError, match="not a string"):
        Config.from_dict(raw)
    apply_overrides(Config(), [text])  # the same value as --set text is parsed


def _tiny_run_config():
    cfg = tiny()
    return replace(cfg, data=replace(cfg.data, corpus=TEXT),
                   train=replace(cfg.train, steps=6, ckpt_every=2, eval_every=6, probe_every=6))


def test_a_hard_stop_during_a_save_names_the_checkpoint_on_disk(tmp_path, monkeypatch):
    """The second Ctrl-C lands while step 4 is being saved, before its folder is renamed
    into place: the newest checkpoint is step 2, and that is what is reported."""
    real = stop_mod.save_checkpoint

    def interrupted(run_dir, step, *args, **kwargs):
        if step == 4:
            raise KeyboardInterrupt
        return real(run_dir, step, *args, **kwargs)

    monkeypatch.setattr(stop_mod, "save_checkpoint", interrupted)
    summary = train(_tiny_run_config(), tmp_path / "run", progress=False)
    assert [s for s, _ in checkpoint_dirs(tmp_path / "run")] == [2]
    assert summary.status == "interrupted" and summary.step == 2
    assert "newest checkpoint on disk is step 2" in summary.message
    assert "step 4" in summary.message  # where the loop was, told as such


def test_a_hard_stop_after_the_rename_names_that_checkpoint(tmp_path, monkeypatch):
    real = stop_mod.save_checkpoint

    def interrupted_after(run_dir, step, *args, **kwargs):
        path = real(run_dir, step, *args, **kwargs)
        if step == 4:
            raise KeyboardInterrupt
        return path

    monkeypatch.setattr(stop_mod, "save_checkpoint", interrupted_after)
    summary = train(_tiny_run_config(), tmp_path / "run", progress=False)
    assert summary.step == 4 and "newest checkpoint on disk is step 4" in summary.message


def test_a_full_disk_is_one_line_naming_what_resume_finds(tmp_path, monkeypatch, capsys):
    real = stop_mod.save_checkpoint
    target = tmp_path / "run"

    def full(run_dir, step, *args, **kwargs):
        if step == 4:
            raise OSError(errno.ENOSPC, "No space left on device", str(target / "x.tmp"))
        return real(run_dir, step, *args, **kwargs)

    monkeypatch.setattr(stop_mod, "save_checkpoint", full)
    config = tmp_path / "c.json"
    config.write_text(_tiny_run_config().to_json())
    capsys.readouterr()
    code = main(["train", "--config", str(config), "--out", str(target), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "No space left on device" in err[0] and "newest checkpoint on disk is step 2" in err[0]
    monkeypatch.setattr(stop_mod, "save_checkpoint", real)  # room again: --resume finishes
    assert main(["train", "--config", str(config), "--out", str(target), "--resume",
                 "--no-progress"]) == 0
    assert [s for s, _ in checkpoint_dirs(target)][-1] == 6


def test_a_hugging_face_config_is_named_as_one(tmp_path, capsys):
    """An exported or downloaded checkpoint's config.json given as a config or a run said
    "unknown config section 'architectures'"; it now names the file, what it is and the
    commands that take it."""
    import json

    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                    "model_type": "llama", "hidden_size": 64}))
    for argv in (["model", "describe", "--config", str(folder / "config.json")],
                 ["generate", "--run", str(folder), "--prompt-ids", "1"],
                 ["train", "--config", str(folder / "config.json"), "--corpus", TEXT,
                  "--out", str(tmp_path / "out")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"depthlab: error: {folder / 'config.json'}: a Hugging Face "
                              "config.json") and "depthlab hf import" in err, argv
    assert not (tmp_path / "out").exists()
