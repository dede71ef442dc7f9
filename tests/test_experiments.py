"""Each experiment at the micro budget: the right grid, a valid export, charts, skip and resume."""

import json
from pathlib import Path

import pytest

from depthlab.config import diff
from depthlab.errors import UserError
from depthlab.experiments import BUDGETS, EXPERIMENTS, get_experiment, run_experiment
from depthlab.experiments.report import downsample, validate_export
from depthlab.experiments.reuse import grid_hash
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


# Computed on main by the previous layout (all experiments in experiments/catalog.py),
# before each experiment moved to a module of its own: reuse.grid_hash over the run
# names, every run's config_sha256 and init_only. Equal hashes mean the same runs, seeds
# and configs, so finished run directories stay reusable.
GRID_HASHES = {
    "quick": {
        "residual": (12, "f5472e493e7114177ea442cd38bf51063bf1ed498465ea581360b4d80926fc76"),
        "init-gradients": (12, "f50f55c465d97ac31c07d794b917e7cbaf7bf9572cfd4cef604c06b163183a11"),
        "stream-rms": (5, "593e36a0e69a7bddced23219209a241f2fed2702fa70b4acf5d20add1c974077"),
        "norm-placement": (4, "08790700d857dd67f029fc28c6fd795a38e3750b564396cd874576aab8035003"),
        "norm-type": (3, "299b02421efc1defa2c3663e1767ff13080ba7ac02e554bd0ae3a805f3d675d5"),
        "attn-gate": (2, "36c6e8149164f2078bf7935b4b1c0bce1e8065fca00747432aebbaa6c96bab48"),
    },
    "standard": {
        "residual": (42, "3706e4d68d02c58da57a338df937214e09929c002bb6e4fc3468beafb2ca4827"),
        "init-gradients": (12, "fc75b3746da1a7f204c6e4ea6228845c5263b6cb928cb7baedfe984ff857205e"),
        "stream-rms": (5, "3a2d74cf234b7d8e0304470baa065eb74532377f392d90cb7798337c2fa54fd1"),
        "norm-placement": (72, "542c8afed31c91cccc048cf9a12a44a5c34673feea07cfd131305ce7b9f33986"),
        "norm-type": (9, "be2498913586ec4608e28b0aed069d788a93c917dadc7b620c549d285c4ae493"),
        "attn-gate": (6, "ab2305124a2087e3095c5b08b28a5d218bdb5c5554d369e4b03890164117ffa1"),
    },
}


@pytest.mark.parametrize("budget", list(GRID_HASHES))
def test_grids_keep_the_config_hashes_of_the_previous_layout(budget):
    from depthlab.experiments.attn_gate import WIDE

    b = BUDGETS[budget]
    for name, (runs, want) in GRID_HASHES[budget].items():
        # arms added since (attn-gate's wide pair) come after the old ones, which keep theirs
        specs = [s for s in get_experiment(name).grid(base_config(b), b, b.seeds)
                 if s.arm not in WIDE]
        assert (len(specs), grid_hash(specs)) == (runs, want), name


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


def test_residual_is_a_depth_sweep_with_the_twelve_layer_pair_at_standard():
    exp = get_experiment("residual")
    quick, standard = BUDGETS["quick"], BUDGETS["standard"]
    specs = exp.grid(base_config(quick), quick, quick.seeds)
    cells = {(s.cfg.model.n_layers, s.cfg.model.residual) for s in specs}
    assert cells == {(d, r) for d in (1, 2, 3, 4, 6, 8) for r in ("plain", "none")}
    assert all(s.cfg.model.placement == "pre" and s.cfg.model.final_norm for s in specs)
    assert {s.cfg.train.steps for s in specs} == {quick.sweep_steps}
    full = exp.grid(base_config(standard), standard, standard.seeds)
    assert {s.cfg.model.n_layers for s in full} == {1, 2, 3, 4, 6, 8, 12}
    assert standard.seeds >= 3 and {s.cfg.train.steps for s in full} == {standard.steps}


def test_quick_sweep_costs_no_more_than_the_four_runs_it_replaces():
    # Tests never time: the cost of a run is about depth x steps (the blocks dominate a
    # step of the course model), and the old quick grid (4 and 12 layers, with and without
    # residual, 300 steps) took about 7 minutes on 2 cores.
    b = BUDGETS["quick"]
    specs = get_experiment("residual").grid(base_config(b), b, b.seeds)
    assert sum(s.cfg.model.n_layers * s.cfg.train.steps for s in specs) <= 2 * (4 + 12) * 300


def test_norm_placement_grid_runs_over_learning_rate_at_standard():
    exp = get_experiment("norm-placement")
    standard, quick = BUDGETS["standard"], BUDGETS["quick"]
    specs = exp.grid(base_config(standard), standard, 1)
    cells = {(s.cfg.model.placement, s.cfg.train.warmup_steps > 0, s.cfg.train.lr) for s in specs}
    assert cells == {(p, w, lr) for p in ("pre", "post") for w in (True, False)
                     for lr in (2e-3, 3e-3, 4e-3, 5e-3, 7e-3, 1e-2)}
    from depthlab.experiments.placement import HIGH_LR

    assert all(HIGH_LR in b.lrs for b in BUDGETS.values())  # the arms the loss charts draw
    names = {s.arm for s in exp.grid(base_config(quick), quick, 1)}
    assert names == {"pre-warmup", "pre-nowarmup", "post-warmup", "post-nowarmup"}


def test_largest_trained_lr_and_xiong_profile():
    from depthlab.experiments.baselines import Baselines
    from depthlab.experiments.init_gradients import xiong_profile
    from depthlab.experiments.placement import largest_trained_lr

    base = Baselines(unigram=3.3, bigram=2.5, tokens=100, windows=2, val_tokens=1000)
    done = [True]
    finals = {"post-nowarmup-lr0.002": ([2.0], done), "post-nowarmup-lr0.003": ([2.1], done),
              "post-nowarmup": ([3.29], done)}
    assert largest_trained_lr(finals, "post", "nowarmup", [2e-3, 3e-3, 5e-3], 5e-3, base) == 3e-3
    finals["post-nowarmup-lr0.003"] = ([2.1], [False])  # did not complete: does not train
    assert largest_trained_lr(finals, "post", "nowarmup", [2e-3, 3e-3, 5e-3], 5e-3, base) == 2e-3
    finals["post-nowarmup-lr0.002"] = ([3.31], done)
    finals["post-nowarmup-lr0.003"] = ([3.28], done)  # within 5% of unigram - bigram: stuck
    assert largest_trained_lr(finals, "post", "nowarmup", [2e-3, 3e-3, 5e-3], 5e-3, base) is None
    assert "both agree" in xiong_profile(2.0, 1.0)["en"]
    mixed = xiong_profile(1.02, 0.30)["en"]
    assert "Post-LN's is flat" in mixed and "Pre-LN's falls toward the output" in mixed
    assert "Post-LN and Pre-LN differ" in mixed


def plateau_export(none: dict[int, list[float]], plain: float = 1.9) -> dict:
    """A constructed residual export.json: the final losses per depth and seed."""
    per_seed = {}
    for d, values in none.items():
        for res, vs in (("none", values), ("plain", [plain] * len(values))):
            per_seed[f"L{d}-{res}"] = {"seed": list(range(len(vs))), "final_val_loss": vs,
                                       "completed": [True] * len(vs), "steps": 500}
    return {"experiment": "residual", "per_seed": per_seed,
            "baselines": {"unigram": 3.3045, "bigram": 2.4943, "tokens": 100, "windows": 2,
                          "val_tokens": 1000},
            "conclusions": [{"en": "gap", "zh": "gap"}] * 3 + [{"en": "kept", "zh": "kept"}]}


def test_plateau_rule_is_applied_per_seed_as_well_as_to_the_mean():
    """1 of 3 seeds leaves the plateau at 2 layers while their mean stays (its spread is
    larger than its distance): the sentence says both, and no 'no model from 2 layers on'.
    The margin is 5% of unigram - bigram = 0.0405 nats, the rule's wording gives it."""
    from depthlab.experiments.residual import reword

    export = plateau_export({1: [2.10, 2.12, 2.15], 2: [2.60, 3.305, 3.306],
                             3: [3.305, 3.3055, 3.306], 4: [3.305, 3.3055, 3.306]})
    out = reword(export)
    assert out[3] == {"en": "kept", "zh": "kept"}  # sentences that need the runs stay
    plateau = out[1]["en"]
    assert plateau.startswith("Without residual, in 500 steps: at 1 layer every seed leaves "
                              "the plateau (3 of 3), and so does their mean; at 2 layers 1 of 3 "
                              "seeds leave it but their mean does not")
    assert "from 3 layers on no seed leaves it (0 of 3 at each depth)" in plateau
    assert "more than 5% of the unigram-bigram distance (0.041 nats)" in plateau
    assert "more than that and more than the seeds' spread" in plateau
    assert "from 2 layers on" not in plateau
    assert "1 of 3 seeds alone end below it by more than 0.041 nats" in out[2]["en"]
    zh = out[1]["zh"]
    assert "2 层有 1 个种子（共 3 个）离开了平台，但种子均值没有" in zh and "（0.041 nats）" in zh
    # a seed just inside the margin does not leave; one just beyond it does
    edge = plateau_export({1: [3.3045 - 0.0404] * 3, 2: [3.3045 - 0.0406] * 3})
    words = reword(edge)[1]["en"]
    assert "at 1 layer no seed leaves the plateau (0 of 3)" in words
    assert "at 2 layers every seed leaves the plateau (3 of 3), and so does their mean" in words
    one = plateau_export({1: [2.1], 2: [3.30], 3: [3.306]})
    assert "at 1 layer every seed leaves the plateau (1 of 1)" in reword(one)[1]["en"]
    assert "from 2 layers on no seed leaves it" in reword(one)[1]["en"]


def test_norm_placement_names_the_margin_and_the_seeds_alone():
    """Post-Norm without warmup at 4e-3: 1 of 3 seeds trains, the mean (2.83) is below
    the plateau but not by its spread: the largest lr stays 3e-3 and the seed is named."""
    from depthlab.experiments.baselines import Baselines
    from depthlab.experiments.placement import ARMS, HIGH_LR, arm_name, largest_lr_sentence

    base = Baselines(unigram=3.3045, bigram=2.4943, tokens=100, windows=2, val_tokens=1000)
    lrs = [3e-3, 4e-3, 5e-3]
    finals = {arm_name(p, w, lr, HIGH_LR): ([1.9, 1.91, 1.92], [True] * 3)
              for p, w, _, _ in ARMS for lr in lrs}
    finals[arm_name("post", "nowarmup", 4e-3, HIGH_LR)] = ([1.8728, 3.3059, 3.3062], [True] * 3)
    finals[arm_name("post", "nowarmup", 5e-3, HIGH_LR)] = ([3.3045, 3.3055, 3.3062], [True] * 3)
    finals[arm_name("post", "warmup", 5e-3, HIGH_LR)] = ([1.85, 1.86, 1.87], [True, True, False])
    words = largest_lr_sentence(finals, lrs, HIGH_LR, base)
    en = words["en"]
    assert "more than 5% of the unigram-bigram distance, 0.041 nats" in en
    assert "Post-Norm without warmup 0.003 (seeds alone: 1 of 3 train at 0.004)" in en
    assert "Post-Norm with warmup 0.004 (seeds alone: 2 of 3 train at 0.005)" in en
    assert "Pre-Norm with warmup 0.005," in en
    assert "0.004 时 3 个中 1 个能训练" in words["zh"]


def test_stuck_depths_are_placed_at_above_or_below_the_unigram_within_their_spread():
    """The standard sweep's 3-12-layer models end 0.001 above the unigram baseline with a
    seed spread of 0.0008: they are above it, not 'at' it; a depth whose seeds scatter
    widely is at it; one seed allows neither claim."""
    from depthlab.experiments.baselines import Baselines
    from depthlab.experiments.residual import _unigram_level

    base = Baselines(unigram=3.3045, bigram=2.49, tokens=100, windows=2, val_tokens=1000)
    finals = {(2, "none"): [2.63, 3.30, 3.31], (3, "none"): [3.3052, 3.3055, 3.3060],
              (4, "none"): [3.3050, 3.3056, 3.3058], (6, "none"): [3.10, 3.101, 3.102]}
    left = {1: True, 2: False, 3: False, 4: False, 6: False}
    words = _unigram_level([1, 2, 3, 4, 6], left, finals, base, seeds=3)["en"]
    assert words.startswith("By the rule for the seed mean, 2, 3, 4, 6 layers without "
                            "residual stay on the plateau")
    assert ("2 layers end -0.2245 nats from it, within their seed spread (up to ±0.3400): their "
            "mean is not distinguishable from it, but 1 of 3 seeds alone end below it") in words
    assert "3, 4 layers end +0.0010 to +0.0011 nats from it, above it beyond" in words
    assert "6 layers end -0.2035 nats from it, below it beyond their seed spread" in words
    one = _unigram_level([3], {3: False}, {(3, "none"): [3.3055]}, base, seeds=1)["en"]
    assert "one seed, so no spread" in one and "at the unigram level:" not in one
    assert _unigram_level([1], {1: True}, {}, base, 3)["en"].startswith("No model without")


def test_ngram_baselines_by_hand():
    import math

    import numpy as np

    from depthlab.experiments.baselines import ngram_losses

    train = np.array([0, 1, 0, 1, 0, 2])  # counts 3, 2, 1; pairs 01 x2, 10 x2, 02 x1
    prev, target = np.array([0, 1]), np.array([1, 0])
    uni, bi = ngram_losses(train, prev, target, vocab=4)
    assert uni == pytest.approx(-(math.log(3 / 10) + math.log(4 / 10)) / 2)
    # P(1|0) = (2 + 1) / (3 + 4); P(0|1) = (2 + 1) / (2 + 4)
    assert bi == pytest.approx(-(math.log(3 / 7) + math.log(3 / 6)) / 2)


def test_eval_windows_spread_over_the_whole_split_without_overlap():
    from depthlab.train.batches import eval_offsets

    offsets, length = eval_offsets(10_000, 64, 1024)
    assert length == 64 and len(offsets) == 16
    assert all(b - a >= length for a, b in zip(offsets, offsets[1:], strict=False))
    assert offsets[0] == 0 and offsets[-1] > 10_000 * 0.9 and offsets[-1] + length < 10_000
    tiled, _ = eval_offsets(641, 64, 10**9)  # more than the split: every window, tiled
    assert list(tiled) == [64 * i for i in range(10)]
    short, n = eval_offsets(5, 64, 1024)
    assert list(short) == [0] and n == 4


def test_input_dependence_is_zero_for_a_constant_predictor():
    import torch

    from depthlab.train.measures import input_dependence

    constant = torch.randn(1, 1, 7).expand(3, 5, 7)
    assert input_dependence(constant) == pytest.approx(0.0, abs=1e-6)
    sharp = 50 * torch.eye(4).reshape(1, 4, 4)  # four positions, each certain of another token
    assert input_dependence(sharp) == pytest.approx(0.75, abs=1e-4)


@pytest.mark.parametrize("name", list(EXPERIMENTS))
@pytest.mark.slow
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
    val = [c for c in export["charts"] if c["id"] == "val_loss"]
    for chart in val:  # every loss chart carries the baselines of the tokens it is scored on
        labels = [s["label"] for s in chart["series"]]
        assert any(lb.startswith("unigram baseline") for lb in labels)
        assert any(lb.startswith("bigram baseline") for lb in labels)
    if val:
        b = export["baselines"]
        assert b["bigram"] < b["unigram"] and b["tokens"] == BUDGETS["micro"].eval_tokens
    assert json.loads((root / "status.json").read_text())["state"] == "done"


def test_residual_export_draws_depth_with_spread_and_the_collapse(micro_runs):
    export = json.loads((micro_runs / "residual" / "export.json").read_text())
    charts = {c["id"]: c for c in export["charts"]}
    depth = charts["depth"]
    assert depth["series"][0]["x"] == list(BUDGETS["micro"].depths)
    assert all(lo <= y <= hi for s in depth["series"][:2]
               for lo, y, hi in zip(s["lo"], s["y"], s["hi"], strict=True))
    collapse = charts["collapse"]["series"]
    assert [s["label"] for s in collapse[:-1]] == ["gradient of block 1", "gradient of block 2"]
    # dense probes early: every step of the first eval_every, then every eval_every
    assert collapse[0]["x"] == [0, 1, 2, 4]
    assert "input_dependence" in charts
    assert any("Without residual at 2 layers" in c["en"] for c in export["conclusions"])
    placement = json.loads((micro_runs / "norm-placement" / "export.json").read_text())
    assert {"collapse", "lr", "input_dependence"} <= {c["id"] for c in placement["charts"]}
    assert any(c["en"].startswith("Largest learning rate of 0.002, 0.005")
               for c in placement["conclusions"])


@pytest.mark.parametrize("name", ["residual", "norm-placement"])
def test_reword_renders_from_per_seed_what_the_analysis_wrote(micro_runs, name):
    export = json.loads((micro_runs / name / "export.json").read_text())
    runs = export["per_seed"]
    assert sum(len(r["final_val_loss"]) for r in runs.values()) == len(
        list((micro_runs / name / "runs").iterdir()))
    assert get_experiment(name).reword(export) == export["conclusions"]


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


def test_gap_growth_names_where_the_gap_grows():
    from depthlab.experiments.residual import _gap_growth

    depths = [1, 2, 3, 4]
    gaps = {1: 0.07, 2: 1.18, 3: 1.17, 4: 1.20}
    sentence = _gap_growth(depths, gaps, dict.fromkeys(depths, 0.0), 3)
    assert "grows with depth" in sentence["en"]
    assert "between 1 and 2 layers (+0.070 -> +1.180)" in sentence["en"]
    assert "from 2 to 4 layers it stays between +1.170 and +1.200" in sentence["en"]
    assert "1 层到 2 层之间" in sentence["zh"]
    flat = _gap_growth(depths, {1: 1.0, 2: 1.01, 3: 0.99, 4: 1.02}, dict.fromkeys(depths, 0.05), 3)
    assert "does not grow beyond the seed spread" in flat["en"]


EXPERIMENTS_DIR = Path(__file__).parent.parent / "depthlab" / "experiments"


def _package_imports(path: Path) -> set[str]:
    """The depthlab modules a source file imports, at the top or inside functions."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("depthlab"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("depthlab")}
    return found


def test_experiment_imports_form_no_circle_and_never_point_up():
    import graphlib

    modules = {p.stem: p for p in EXPERIMENTS_DIR.glob("*.py") if p.stem != "__init__"}
    graph = {}
    for name, path in modules.items():
        imported = _package_imports(path)
        assert not {m for m in imported if m.startswith(("depthlab.web", "depthlab.cli"))}, name
        from_package = {m.rsplit(".", 1)[1] for m in imported
                        if m.startswith("depthlab.experiments.") and m.count(".") == 2}
        assert from_package <= set(modules), f"{name} imports names of the package itself"
        graph[name] = {m.rsplit(".", 1)[1] for m in imported
                       if m.startswith("depthlab.experiments.")} & set(modules)
    graphlib.TopologicalSorter(graph).static_order()  # raises CycleError on a circle
    assert "runner" not in graph["report"] and "report" in graph["runner"]


def test_no_sentence_is_written_in_the_experiment_modules():
    import re

    cjk = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
    for path in EXPERIMENTS_DIR.glob("*.py"):
        hits = [n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                if cjk.search(line)]
        assert not hits, f"{path.name} lines {hits}: sentences go to locales/*/experiments.json"


def test_every_experiment_module_is_registered_and_has_its_question():
    import pkgutil

    import depthlab.experiments as package
    from depthlab.experiments import registry
    from depthlab.locales import LANGS, table

    defining = {m.name for m in pkgutil.iter_modules(package.__path__)
                if "\nEXPERIMENT = " in (EXPERIMENTS_DIR / f"{m.name}.py").read_text()}
    assert defining == set(registry.MODULES)
    assert list(EXPERIMENTS) == [e.name for e in registry.load().values()]
    for name in EXPERIMENTS:
        for lang in LANGS:
            assert table(lang)[f"experiments.{name}.question"].strip(), (name, lang)
    with pytest.raises(ValueError, match="'residual' is defined twice"):
        registry.load(("residual", "residual"))


def test_sentences_fill_each_language_with_its_own_words():
    from depthlab.experiments.analysis import gap_sentence
    from depthlab.experiments.wording import joined, phrase, same

    assert joined([same("1"), same("2")]) == {"en": "1, 2", "zh": "1、2"}
    one = gap_sentence(phrase("attn-gate.what.val_loss", shape=same("d 128")), [3.0], [3.5],
                       phrase("attn-gate.name.ungated"), phrase("attn-gate.name.gated"))
    assert one["en"] == ("Validation loss (d 128): the gated model ends 0.5000 nats higher than the "
                         "ungated model (3.5000 vs 3.0000; 1 seed, spread not measured).")
    assert one["zh"].startswith("验证损失（d 128）：带门控模型最终比无门控模型高 0.5000 nats")
    assert "1 个种子" in one["zh"]
    noisy = gap_sentence(same("x"), [3.0, 3.4], [3.1, 3.5], same("a"), same("b"))
    assert "no difference is claimed" in noisy["en"] and "2 seeds, spread ±0.4000" in noisy["en"]
    assert "2 seeds, spread ±0.4000; seed by seed, b ends higher in 2 of 2)" in noisy["en"]
    split = gap_sentence(same("x"), [3.0, 3.4, 3.2], [3.1, 3.3, 3.2], same("a"), same("b"))
    assert "seed by seed, b ends higher in 1 of 3)" in split["en"]  # a tie is not higher
    assert "逐个种子对比，b在 3 个中有 1 个更高" in split["zh"]
    lower = gap_sentence(same("x"), [3.0, 3.01], [2.0, 2.01], same("a"), same("b"))
    assert "ends 1.0000 nats lower than a" in lower["en"] and "低 1.0000 nats" in lower["zh"]
    assert "diverged" in gap_sentence(same("x"), [3.0], [float("inf")], same("a"), same("b"))["en"]


def test_list_names_prints_the_registry_one_per_line(capsys):
    from depthlab.cli import main

    assert main(["experiment", "--list", "--names"]) == 0
    assert capsys.readouterr().out.splitlines() == list(EXPERIMENTS)
    assert main(["experiment", "--names"]) != 0
    assert "--names goes with --list" in capsys.readouterr().err


def test_finished_runs_of_an_edited_corpus_are_not_reused(micro_runs, monkeypatch):
    """The grid's configs name the corpus by path; its runs recorded the text's sha256. An
    edited file (read here as other text) makes every finished run stale: refused by name
    without --rerun, instead of 'all runs were finished'."""
    from depthlab.corpus import Corpus
    from depthlab.experiments import reuse

    b = BUDGETS["micro"]
    specs = get_experiment("residual").grid(base_config(b, CORPUS), b, b.seeds)
    runs = micro_runs / "residual" / "runs"
    assert reuse.check_grid(specs, runs, rerun=False) == set()
    monkeypatch.setattr(reuse, "load_corpus", lambda spec, *a: Corpus(spec, "edited text", ()))
    with pytest.raises(UserError, match="was trained on another text of"):
        reuse.check_grid(specs, runs, rerun=False)
    assert reuse.check_grid(specs, runs, rerun=True) == {s.name for s in specs if not s.init_only}


@pytest.mark.parametrize("files", [
    {"summary.md": "my notes", "status.json": '{"mine": 1}'},  # someone's, with our names
    {"config.json": "{}", "model.safetensors": "x", "metrics.jsonl": ""},  # a training run
    {"status.json": '{"experiment": "norm-type"}'},  # another experiment's folder
    {"export.json": '{"experiment": "norm-type"}', "notes.txt": "mine"}])
def test_an_experiment_writes_only_into_its_own_folder(tmp_path, files):
    """DIR/NAME holding anything but this experiment's own files is refused before a
    byte is written: the export would overwrite summary.md and status.json, or fill a
    training run's folder."""
    folder = tmp_path / "out" / "residual"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    with pytest.raises(UserError, match="is not a 'residual' experiment folder depthlab wrote"):
        run_experiment("residual", budget="micro", out_dir=tmp_path / "out", corpus=CORPUS,
                       progress=False, echo=False)
    assert {p.name: p.read_text() for p in folder.iterdir()} == files


def test_a_copied_export_of_the_experiment_is_measured_again(tmp_path, monkeypatch):
    """A folder holding only this experiment's export.json (copied from docs/results for
    the page) is its folder: the experiment runs into it."""
    folder = tmp_path / "out" / "init-gradients"
    folder.mkdir(parents=True)
    (folder / "export.json").write_text('{"experiment": "init-gradients"}')
    run_experiment("init-gradients", budget="micro", out_dir=tmp_path / "out", corpus=CORPUS,
                   progress=False, echo=False)
    assert json.loads((folder / "status.json").read_text())["state"] == "done"


def test_ctrl_c_while_exporting_leaves_the_status_interrupted(micro_runs, tmp_path, monkeypatch):
    """Every run is done and the export is cut short: status.json says interrupted, not
    running (the page only settles jobs it started), and the same command finishes it."""
    import shutil

    from depthlab.experiments import EXPORT_FILE, runner

    shutil.copytree(micro_runs / "residual", tmp_path / "residual")
    (tmp_path / "residual" / EXPORT_FILE).unlink()
    real = runner.export

    def cut(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(runner, "export", cut)
    with pytest.raises(KeyboardInterrupt):
        run_experiment("residual", budget="micro", out_dir=tmp_path, corpus=CORPUS,
                       progress=False, echo=False)
    status = json.loads((tmp_path / "residual" / "status.json").read_text())
    assert status["state"] == "interrupted" and status["runs_done"] == status["runs_total"]
    monkeypatch.setattr(runner, "export", real)
    run_experiment("residual", budget="micro", out_dir=tmp_path, corpus=CORPUS, progress=False,
                   echo=False)
    assert json.loads((tmp_path / "residual" / "status.json").read_text())["state"] == "done"
    assert (tmp_path / "residual" / EXPORT_FILE).exists()
