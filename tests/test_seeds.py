"""`--seeds` for every experiment: a count or the seeds themselves, validated in one
line, and honoured by the grid, the reuse hash and the export."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from depthlab.errors import UserError
from depthlab.experiments import BUDGETS, EXPERIMENTS, get_experiment, run_experiment
from depthlab.experiments.reuse import grid_hash
from depthlab.experiments.spec import base_config, parse_seeds, seed_list, seeds_text

CORPUS = str(Path(__file__).parent / "data" / "tiny_shakespeare.txt")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("text", "seeds"), [
    ("3", 3), ("0,1,2", (0, 1, 2)), ("7,11", (7, 11)), ("7,", (7,)), ("7-7", (7,)),
    ("1000-1002", (1000, 1001, 1002)), ("5, 9", (5, 9)), ("2,4-5", (2, 4, 5))])
def test_seeds_parse_as_a_count_or_the_seeds_themselves(text, seeds):
    assert parse_seeds(text) == seeds
    assert parse_seeds(seeds_text(seeds)) == seeds  # what the command line records reads back


@pytest.mark.parametrize(("text", "says"), [
    ("0", "a count must be 1-10"), ("11", "a count must be 1-10"), ("x", "'x' is not a seed"),
    ("1,1", "named twice"), ("3-1", "'3-1' is not in 0-"), ("0-10", "more than 10 seeds"),
    ("", "is not a seed"), ("1,-2", "'-2' is not a seed"), ("4294967296,", "is not in 0-")])
def test_bad_seeds_are_one_line_errors_naming_the_field(text, says):
    with pytest.raises(UserError) as e:
        parse_seeds(text)
    assert str(e.value).startswith(f"--seeds {text!r}") and says in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("count", ["0", "11", "42"])
def test_a_count_out_of_range_says_how_to_name_that_seed(count):
    # "--seeds 0" reads as a count; the error spells the one-seed form, and that form parses
    with pytest.raises(UserError) as e:
        parse_seeds(count)
    assert f"(seed {count} alone is {count},)" in str(e.value)
    assert parse_seeds(f"{count},") == (int(count),)
    with pytest.raises(UserError) as e:  # not a seed at all: no such hint
        parse_seeds("99999999999")
    assert "alone is" not in str(e.value)


def test_the_command_line_refuses_bad_seeds_with_exit_2():
    done = subprocess.run([sys.executable, "-m", "depthlab", "experiment", "residual",
                           "--seeds", "1,x"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        line for line in done.stderr.strip().splitlines() if "--seeds '1,x'" in line]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_every_grid_runs_exactly_the_named_seeds(name):
    b = BUDGETS["micro"]
    exp = get_experiment(name)
    specs = exp.grid(base_config(b, CORPUS), b, (7, 1003))
    assert {s.seed for s in specs} == {7, 1003}
    assert all(s.cfg.train.seed == s.seed and s.name.endswith(f"-s{s.seed}") for s in specs)
    for arm in {s.arm for s in specs}:  # every arm over every named seed, once
        assert sorted(s.seed for s in specs if s.arm == arm) == [7, 1003]


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_a_count_is_the_seeds_from_zero_and_other_seeds_are_another_grid(name):
    b = BUDGETS["standard"]
    exp = get_experiment(name)
    count = exp.grid(base_config(b), b, b.seeds)
    # stream-rms measures one seed (0) of a count; named seeds it runs all
    named = exp.grid(base_config(b), b, (0,) if name == "stream-rms" else seed_list(b.seeds))
    assert grid_hash(named) == grid_hash(count)  # finished runs of `--seeds 3` are reused
    other = exp.grid(base_config(b), b, (5,))
    assert grid_hash(other) != grid_hash(count)


def test_seeds_reach_the_runs_the_export_and_the_record(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))
    root = run_experiment("norm-type", budget="micro", out_dir=tmp_path, seeds="5,", corpus=CORPUS,
                          progress=False, echo=False)
    export = json.loads((root / "export.json").read_text())
    assert export["seeds"] == [5]
    assert "--seeds 5," in export["command"]
    runs = sorted(p.name for p in (root / "runs").iterdir())
    assert runs and all(r.endswith("-s5") for r in runs)
    record = json.loads((root / "experiment.json").read_text())
    assert record["seeds"] == [5]
    assert "Budget `micro`, seeds 5, exported" in (root / "summary.md").read_text()
