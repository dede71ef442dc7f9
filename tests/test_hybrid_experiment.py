"""The hybrid experiment: its arms really are the course model, the 3:1 DeltaNet pattern
and all DeltaNet, on both bundled corpora at the budget's hybrid steps; its race at equal
CPU time reads the losses it should; at micro it trains and exports on both corpora."""

import json
from pathlib import Path

import pytest

from depthlab.config import validate
from depthlab.experiments import BUDGETS, get_experiment, run_experiment
from depthlab.experiments.hybrid import COLUMNS, CORPORA, KINDS, loss_at_cpu, time_sentence
from depthlab.experiments.report import validate_export
from depthlab.experiments.spec import RunResult, RunSpec, base_config

CORPUS = str(Path(__file__).parent / "data" / "tiny_shakespeare.txt")
ATTENTION, DELTA = "attention", "gated_deltanet"


def test_standard_grid_is_three_mixers_on_both_corpora_at_the_hybrid_steps():
    budget = BUDGETS["standard"]
    specs = get_experiment("hybrid").grid(base_config(budget), budget, budget.seeds)
    assert budget.hybrid_steps is not None and budget.hybrid_steps < budget.steps
    assert len(specs) == 3 * 2 * budget.seeds
    kinds = {"course": (ATTENTION,) * 4, "hybrid": (DELTA, DELTA, DELTA, ATTENTION),
             "deltanet": (DELTA,) * 4}
    for spec in specs:
        corpus, kind = spec.arm.split("-")
        cfg = validate(spec.cfg)
        assert cfg.data.corpus == corpus and corpus in CORPORA
        assert cfg.model.layer_kinds == kinds[kind], spec.name
        # the same model otherwise: width, depth, heads, norm as the course preset's
        assert (cfg.model.d_model, cfg.model.n_layers) == (128, 4)
        assert cfg.train.steps == budget.hybrid_steps
        assert cfg.train.eval_every % cfg.train.log_every == 0  # a cpu_s at every evaluation
    assert {s.cfg.data.corpus for s in specs} == set(CORPORA)
    assert {s.seed for s in specs} == {0, 1, 2}


def test_quick_grid_trains_the_budget_steps_and_a_named_corpus_runs_alone():
    quick = BUDGETS["quick"]
    specs = get_experiment("hybrid").grid(base_config(quick, CORPUS), quick, quick.seeds)
    # a corpus given as a path runs alone, its runs named by the file's stem (folder names)
    assert [s.name for s in specs] == [f"tiny_shakespeare-{k}-s0" for k in ("course", "hybrid", "deltanet")]
    assert {s.cfg.data.corpus for s in specs} == {CORPUS}
    assert {s.cfg.train.steps for s in specs} == {quick.steps}


def test_the_page_has_chinese_for_every_word_the_export_keeps_in_english():
    from depthlab.locales import table

    en, zh = table("en"), table("zh")
    words = {v: k for k, v in en.items() if k.startswith("data.") and "{" not in v}
    for word in [label for _, label, _ in KINDS] + list(COLUMNS) + list(CORPORA):
        assert word in words, word
        assert zh[words[word]] and zh[words[word]] != word, word


def _run(arm: str, seed: int, points: list[tuple[int, float, float]]) -> RunResult:
    """A finished run whose train lines log `cpu_s` per step interval and whose
    evaluations read the given losses: points are (step, cpu seconds so far, val loss)."""
    cfg = base_config(BUDGETS["micro"])
    records, cpu = [], 0.0
    for step, total, loss in points:
        if step:
            records.append({"kind": "train", "step": step, "cpu_s": total - cpu, "loss": loss})
        cpu = total
        records.append({"kind": "eval", "step": step, "val_loss": loss})
    records.append({"kind": "run_end", "step": points[-1][0], "status": "completed"})
    return RunResult(RunSpec(arm, seed, cfg, arm), Path("."), records)


def test_loss_at_cpu_interpolates_between_evaluations_and_refuses_beyond_the_run():
    run = _run("hybrid", 0, [(0, 0.0, 4.0), (10, 10.0, 3.0), (20, 30.0, 2.0)])
    assert loss_at_cpu(run, 5.0) == pytest.approx(3.5)
    assert loss_at_cpu(run, 20.0) == pytest.approx(2.5)
    assert loss_at_cpu(run, 30.0) == pytest.approx(2.0)
    assert loss_at_cpu(run, 31.0) is None


def test_time_sentence_reads_the_arm_at_the_course_models_whole_cpu_budget():
    course = [_run("course", s, [(0, 0.0, 4.0), (20, 10.0, 2.0 + 0.01 * s)]) for s in range(3)]
    slow = [_run("hybrid", s, [(0, 0.0, 4.0), (10, 10.0, 3.0 + 0.01 * s), (20, 20.0, 1.5)])
            for s in range(3)]
    name = {"en": "Shakespeare", "zh": "莎士比亚"}
    text = time_sentence(name, "hybrid", course, slow)["en"]
    assert "2.00x the CPU cost" in text and "at the 10.0 CPU-s" in text
    assert "3.0100 ± 0.0100" in text and "1.0000 nats higher" in text, text
    # the same arm, no slower and better at that time: lower, not higher
    fast = [_run("hybrid", s, [(0, 0.0, 4.0), (20, 10.0, 1.5)]) for s in range(3)]
    assert "nats lower" in time_sentence(name, "hybrid", course, fast)["en"]
    # an arm that stopped before the course model's budget: no loss at equal time is read
    short = [_run("hybrid", s, [(0, 0.0, 4.0), (10, 5.0, 2.5)]) for s in range(3)]
    assert "no loss at equal time" in time_sentence(name, "hybrid", course, short)["en"]


@pytest.mark.slow
def test_micro_runs_both_bundled_corpora_and_exports_a_race_per_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))
    root = run_experiment("hybrid", budget="micro", out_dir=tmp_path, progress=False,
                          echo=False)
    export = json.loads((root / "export.json").read_text(encoding="utf-8"))
    assert validate_export(export) == []
    assert [c["id"] for c in export["charts"]] == [
        f"val_loss_{axis}_{corpus}" for corpus in CORPORA for axis in ("tokens", "cpu")]
    assert [row[0] for row in export["table"]["rows"]] == [c for c in CORPORA for _ in range(3)]
    # per corpus: the loss after the same tokens and at equal CPU time, for each DeltaNet arm
    assert len(export["conclusions"]) == 2 * 2 * 2
    assert "Hongloumeng" in export["conclusions"][-1]["en"]
    assert "红楼梦" in export["conclusions"][-1]["zh"]
    for chart in export["charts"]:
        mixers = [s for s in chart["series"] if "baseline" not in s["label"]]
        assert len(mixers) == 3 and all(len(s["x"]) == 3 for s in mixers)  # steps 0, 2, 4


RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
STANDARD = RESULTS / "hybrid.export.json"


def test_the_committed_standard_race_is_an_export_the_page_draws(tmp_path):
    import shutil

    from depthlab.web.runs import Runs

    export = json.loads(STANDARD.read_text(encoding="utf-8"))
    assert validate_export(export) == [] and export["budget"] == "standard"
    assert [c["id"] for c in export["charts"]] == [
        f"val_loss_{axis}_{corpus}" for corpus in CORPORA for axis in ("tokens", "cpu")]
    assert [row[:2] for row in export["table"]["rows"]] == [
        [corpus, label] for corpus in CORPORA for _, label, _ in KINDS]
    for chart in export["charts"]:  # seven evaluations (steps 0-300 every 50) per mixer
        assert [len(s["x"]) for s in chart["series"][:3]] == [7, 7, 7]
    (tmp_path / "hybrid").mkdir()
    shutil.copy(STANDARD, tmp_path / "hybrid" / "export.json")
    runs = Runs(tmp_path)
    item = next(i for i in runs.summary() if i["name"] == "hybrid")
    assert item["has_data"] and item["budget"] == "standard"
    assert runs.export("hybrid") == export
