"""`depthlab --help` and `depthlab model describe`, run as a user would."""

import json
import subprocess
import sys

import pytest

from depthlab.cli import main


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "depthlab", *args], capture_output=True,
                          text=True, timeout=120)


def test_help_lists_commands():
    out = run("--help")
    assert out.returncode == 0
    assert "model" in out.stdout and "describe a model config" in out.stdout


def test_describe_course_prints_blocks_params_and_shapes(capsys):
    assert main(["model", "describe", "--preset", "course", "--tokens", "5", "--check"]) == 0
    out = capsys.readouterr().out
    assert "4 blocks x 2 sublayers = 8 writes" in out
    assert "(attn_norm_in): RMSNorm()" in out and "SwiGLU" in out
    assert "hook_embed                       [5 x 128]" in out
    assert "finite: True" in out


def test_describe_json_with_overrides(capsys):
    assert main(["model", "describe", "--set", "model.n_layers=12", "--set",
                 "model.residual=none", "--json", "--tokens", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["n_layers"] == 12 and data["config"]["residual"] == "none"
    stages = {s["stage"]: s["shape"] for s in data["shapes"]}
    assert stages["logits"] == [3, 2048]
    assert stages["blocks.11.attn.hook_pattern"] == [4, 3, 3]
    assert data["total_params"] == sum(data["params"].values())


@pytest.mark.parametrize("args, fragment", [
    (["--set", "model.n_layer=3"], "unknown config key 'model.n_layer'"),
    (["--set", "model.placement=post", "--set", "model.norm=none"], "needs a norm"),
    (["--preset", "gpt5"], "unknown preset 'gpt5'"),
    (["--tokens", "0"], "--tokens must be between 1 and 4096"),
    (["--config", "/nonexistent/config.json"], "no such config file"),
    (["--tokens", "many"], "invalid int value"),
])
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    out = run("model", "describe", *args)
    assert out.returncode == 2
    assert fragment in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr
