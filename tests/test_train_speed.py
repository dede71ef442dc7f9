"""The training fast path: fused AdamW, and `--compile` falling back to eager with a
one-line message when compilation fails."""

import pytest
import torch
import train_helpers as helpers
from train_helpers import cache  # noqa: F401 (autouse fixture)

from depthlab.metrics import read_metrics
from depthlab.model import Transformer
from depthlab.presets import tiny
from depthlab.train import runtime, train
from depthlab.train.optim import make_optimizer


def config(**train_changes):
    return helpers.config(**{"steps": 12, **train_changes})


def test_adamw_runs_its_fused_kernel_on_cpu():
    cfg = tiny()
    opt = make_optimizer(Transformer(cfg.model), cfg.train)
    assert opt.defaults["fused"] is True


def failing_compile(_net):
    def compiled(*_args, **_kwargs):
        raise RuntimeError("InductorError: no working C++ compiler\nlong detail")
    return compiled


def test_compile_failure_falls_back_to_eager_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch, "compile", failing_compile)
    train(config(), tmp_path / "eager", progress=False)
    compiled = train(config(compile=True), tmp_path / "compiled", progress=False)
    assert compiled.status == "completed"
    err = [line for line in capsys.readouterr().err.splitlines() if "train.compile" in line]
    assert len(err) == 1 and "no working C++ compiler" in err[0] and "without compilation" in err[0]
    losses = lambda run: [r["loss"] for r in read_metrics(run, "train")]  # noqa: E731
    assert losses(tmp_path / "compiled") == losses(tmp_path / "eager")


def test_an_error_after_the_first_compiled_call_is_not_swallowed(monkeypatch):
    calls = {"n": 0}

    def flaky(_net):
        def compiled(x):
            calls["n"] += 1
            if calls["n"] > 1:
                raise ValueError("shape mismatch in step 2")
            return x
        return compiled

    monkeypatch.setattr(torch, "compile", flaky)
    fwd = runtime.compile_or_eager(torch.nn.Identity())
    assert fwd(3) == 3
    with pytest.raises(ValueError, match="step 2"):
        fwd(4)


def test_compile_flag_sets_train_compile_and_is_documented():
    from depthlab.cli import build_parser
    from depthlab.cli.train_cmd import resolve

    parser = build_parser()
    assert resolve(parser.parse_args(["train", "--preset", "tiny", "--compile"])).train.compile
    assert not resolve(parser.parse_args(["train", "--preset", "tiny"])).train.compile
    train_help = next(a for a in parser._subparsers._group_actions[0].choices["train"]._actions
                      if "--compile" in a.option_strings).help
    assert "falls back to eager" in train_help
