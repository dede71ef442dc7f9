"""Each experiment at the micro budget: the right grid, a valid export, charts, skip and resume."""

import json
from pathlib import Path

import pytest

from depthlab.config import diff
from depthlab.errors import UserError
from depthlab.experiments import BUDGETS, EXPERIMENTS, get_experiment, run_experiment
from depthlab.experiments.report import downsample, validate_export
from depthlab.experiments.spec import base_config
from depthlab.metrics import read_metrics

CORPUS = str(Path(__file__).parent / "data" / "tiny_shakespeare.txt")


@pytest.fixture(scope="module")
def micro_runs(tmp_path_factory):
    import os

    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("DEPTHLAB_CACHE")
    os.environ["DEPTHLAB_CACHE"] = str(cache)
    out = tmp_path_factory.mktemp("experiments")
    for name in EXPERIMENTS:
        run_experiment(name, budget="micro", out_dir=out, corpus=CORPUS, progress=False,
                       echo=False)
    yield out
    if old is None:
        os.environ.pop("DEPTHLAB_CACHE")
    else:
        os.environ["DEPTHLAB_CACHE"] = old


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_grid_differs_only_in_the_named_switches(name):
    exp = get_experiment(name)
    budget = BUDGETS["micro"]
    specs = exp.grid(base_config(budget, CORPUS), budget, 2)
    assert len({s.name for s in specs}) == len(specs)
    allowed = set(exp.switches) | {"train.seed"}
    for spec in specs[1:]:
        assert set(diff(specs[0].cfg, spec.cfg)) <= allowed, spec.name
    arms = {s.arm for s in specs}
    assert len(arms) >= 2
    for arm in arms:  # runs of one arm differ only in the seed
        runs = [s for s in specs if s.arm == arm]
        assert all(set(diff(runs[0].cfg, r.cfg)) <= {"train.seed"} for r in runs)


def test_residual_grid_is_the_lessons_pair_of_pairs():
    b = BUDGETS["quick"]
    specs = get_experiment("residual").grid(base_config(b), b, 1)
    cells = {(s.cfg.model.n_layers, s.cfg.model.residual) for s in specs}
    assert cells == {(4, "plain"), (4, "none"), (12, "plain"), (12, "none")}
    assert all(s.cfg.model.placement == "pre" and s.cfg.model.final_norm for s in specs)


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_export_follows_the_schema_and_charts_exist(micro_runs, name):
    root = micro_runs / name
    export = json.loads((root / "export.json").read_text())
    assert validate_export(export) == []
    assert export["experiment"] == name and export["budget"] == "micro"
    assert export["charts"] and export["conclusions"] and export["table"]["rows"]
    for chart in export["charts"]:
        assert any(len(s["x"]) > 0 for s in chart["series"])
        for ext in ("png", "svg"):
            assert (root / f"{name}-{chart['id']}.{ext}").stat().st_size > 1000
    summary = (root / "summary.md").read_text()
    assert export["conclusions"][0]["en"] in summary
    assert json.loads((root / "status.json").read_text())["state"] == "done"


def test_rerun_skips_finished_runs(micro_runs, monkeypatch):
    import depthlab.train as train_module

    def no_training(*a, **k):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(train_module, "train", no_training)
    before = (micro_runs / "residual" / "export.json").read_text()
    run_experiment("residual", budget="micro", out_dir=micro_runs, corpus=CORPUS,
                   progress=False, echo=False)
    assert (micro_runs / "residual" / "export.json").read_text() == before


def test_interrupted_experiment_resumes(tmp_path, monkeypatch):
    from depthlab.train import train

    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))
    b = BUDGETS["micro"]
    first = get_experiment("norm-type").grid(base_config(b, CORPUS), b, 1)[0]
    run_dir = tmp_path / "norm-type" / "runs" / first.name
    partial = train(first.cfg, run_dir, progress=False, max_steps=2)
    assert partial.status == "interrupted" and partial.step == 2
    run_experiment("norm-type", budget="micro", out_dir=tmp_path, corpus=CORPUS,
                   progress=False, echo=False)
    starts = read_metrics(run_dir, "run_start")
    assert starts[-1]["resumed_from"] == 2
    assert read_metrics(run_dir, "run_end")[-1]["status"] == "completed"
    assert read_metrics(run_dir, "eval")[-1]["step"] == b.steps


def test_validate_export_finds_problems():
    assert validate_export([]) == ["top level must be an object"]
    problems = validate_export({"experiment": 1, "charts": [{"series": [{"x": [1], "y": []}]}]})
    assert any("experiment must be a string" in p for p in problems)
    assert any("x and y must be lists of equal length" in p for p in problems)


def test_downsample_keeps_the_last_point():
    x = list(range(2500))
    xs, ys = downsample(x, x, 1000)
    assert len(xs) <= 1000 and xs[-1] == 2499 and xs[0] == 0


def test_bad_names_are_clear_errors(tmp_path):
    with pytest.raises(UserError, match="unknown experiment 'nope'"):
        run_experiment("nope", out_dir=tmp_path)
    with pytest.raises(UserError, match="unknown budget 'huge'"):
        run_experiment("residual", budget="huge", out_dir=tmp_path)
