"""Numbers that are not numbers: a run whose weights hold NaN or inf, or whose logits
overflow, is refused in one line naming the run and what is not finite (never `nan%`,
never torch.multinomial's traceback); `probe run` past the learned positions reads the
prompt's last context_len tokens, as generate and next-token do; a probe gain so small
that float64 underflows says so instead of printing nan."""

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from train_helpers import TEXT, cache, config  # noqa: F401 (cache: autouse fixture)

from depthlab.cli import main
from depthlab.model import Transformer
from depthlab.rundir import read_config
from depthlab.train import train


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny trained run and one with learned positions (context_len 64)."""
    root = tmp_path_factory.mktemp("nonfinite")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEPTHLAB_CACHE", str(root / "cache"))
        train(config(steps=2), root / "rope", progress=False)
        cfg = config(steps=2)
        cfg = type(cfg)(model=type(cfg.model)(**{**cfg.model.__dict__, "position": "learned"}),
                        data=cfg.data, train=cfg.train)
        train(cfg, root / "learned", progress=False)
    return root


def edited(tmp: Path, src: Path, change) -> Path:
    run = tmp / "run"
    shutil.copytree(src, run, ignore=shutil.ignore_patterns(".lock"))
    state = load_file(str(run / "model.safetensors"))
    change(state)
    save_file(state, str(run / "model.safetensors"))
    return run


def first_parameter(run: Path) -> tuple[str, int]:
    """The name and size of the tensor a refusal names: the model's first parameter."""
    cfg, _ = read_config(run)
    name, p = next(iter(Transformer(cfg.model).named_parameters()))
    return name, p.numel()


def cli(capsys, *argv: str) -> tuple[int, str, list[str]]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "nan" not in out.lower()
    return code, out, err.strip().splitlines()


COMMANDS = {
    "generate": lambda run: ["generate", "--run", str(run), "--prompt", "RO", "--tokens", "3"],
    "generate --greedy": lambda run: ["generate", "--run", str(run), "--prompt", "RO",
                                      "--tokens", "3", "--greedy"],
    "next-token": lambda run: ["next-token", "--run", str(run), "--prompt", "RO"],
    "probe run": lambda run: ["probe", "run", str(run), "--prompt", "RO"],
}


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_non_finite_weights_are_one_line_naming_the_run_and_tensor(tmp_path, runs, capsys,
                                                                  command, value):
    name, numel = first_parameter(runs / "rope")

    def poison(state: dict) -> None:
        state[name].view(-1)[3] = value
    run = edited(tmp_path, runs / "rope", poison)
    code, out, err = cli(capsys, *COMMANDS[command](run))
    assert code == 2 and out == "" and err == [
        f"depthlab: error: {run}: the weights are not finite: tensor {name} holds 1 NaN or "
        f"inf value(s) of {numel:,} (a diverged run? its checkpoints/ may hold finite weights)"]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_logits_that_overflow_are_one_line(tmp_path, runs, capsys, command):
    """Finite weights so large that the (tied) LM head overflows float32: the final norm's
    scale 1e30 times, the embedding 1e10 times (the norms inside keep the stream finite)."""
    def inflate(state: dict) -> None:
        state["final_norm.weight"].mul_(1e30)
        state["embed_tokens.weight"].mul_(1e10)
    run = edited(tmp_path, runs / "rope", inflate)
    code, out, err = cli(capsys, *COMMANDS[command](run))
    assert code == 2 and out == "" and len(err) == 1, err
    assert err[0].startswith(f"depthlab: error: {run}: the logits ") and err[0].endswith(
        "; the weights overflow the forward pass"), err
    assert " are not finite (" in err[0]


def test_probe_run_past_the_learned_positions_reads_the_last_ones(runs, capsys):
    run = runs / "learned"
    ids = [(7 * i) % 50 + 1 for i in range(70)]
    code, out, err = cli(capsys, "probe", "run", str(run), "--ids", ",".join(map(str, ids)),
                         "--json")
    assert code == 0 and err == [
        "depthlab: note: the model has 64 learned positions; the probes read the prompt's "
        "last 64 tokens (the first 6 dropped), as generate does"], err
    long = json.loads(out)
    code, out, _ = cli(capsys, "probe", "run", str(run), "--ids", ",".join(map(str, ids[6:])),
                       "--json")
    short = json.loads(out)
    assert long["cropped"] == 6 and short["cropped"] == 0
    assert long["prompt_ids"] == ids[6:]
    assert {**long, "cropped": 0} == short  # the same measurement as the last 64 alone
    code, out, err = cli(capsys, "probe", "run", str(runs / "rope"), "--ids",
                         ",".join(map(str, ids)), "--json")  # RoPE: the whole prompt
    assert code == 0 and json.loads(out)["cropped"] == 0 and err == []


@pytest.mark.parametrize("argv, says", [
    (["gradflow", "--gain", "1e-320"], "in the naive stack the gradients underflow to 0 in "
     "float64 at this gain, so its bottom/top ratios are 0/0"),
    (["gradflow", "--gain", "1e-200", "--residual", "plain", "--json"], "in the naive stack"),
    (["collapse", "--gain", "1e-320"], "in the naive stack the stream's tokens underflow to 0"),
])
def test_a_gain_that_underflows_says_so_instead_of_nan(capsys, argv, says):
    code, out, err = cli(capsys, "probe", *argv)
    gain = argv[2]
    assert code == 2 and out == "" and len(err) == 1, err
    assert err[0].startswith(f"depthlab: error: --gain {gain}: {says}"), err
    assert err[0].endswith("not numbers; give a larger --gain")


def test_a_small_gain_that_still_gives_numbers_is_measured(capsys):
    """1e-20 is tiny but its top gradient is representable: bottom/top underflows to an
    honest 0 (below 1e-308), not 0/0."""
    code, out, _ = cli(capsys, "probe", "gradflow", "--gain", "1e-20", "--json")
    assert code == 0 and json.loads(out)["naive"]["ratio"] == 0.0

