"""`--preset speedrun` is the design the committed standard race found fastest, trained
as the race trained it: a rerun of the race with another winner, or a change to the
preset or to the arms' table, fails here until the other follows."""

import json
from dataclasses import replace
from pathlib import Path

from depthlab.experiments import BUDGETS
from depthlab.experiments import speedrun as sr
from depthlab.experiments.spec import base_config
from depthlab.presets import PRESETS, describe_presets, get_preset

EXPORT = Path(__file__).resolve().parents[1] / "docs" / "results" / "speedrun.export.json"
STANDARD = BUDGETS["standard"]
# How a run is kept and watched, not what it trains: the experiment keeps one checkpoint
# and logs every 10 steps so each evaluation has its CPU time; a learner's run keeps the
# trainer's defaults and its threads are chosen at start.
BOOKKEEPING = ("keep_ckpts", "log_every", "threads")


def committed() -> dict:
    return json.loads(EXPORT.read_text(encoding="utf-8"))


def race_config(arm_name: str):
    arm = next(a for a in sr.ARMS if a.name == arm_name)
    return sr.arm_config(base_config(STANDARD), arm, sr.plan(STANDARD))


def test_the_committed_race_is_the_standard_one_with_three_seeds():
    export = committed()
    assert export["budget"] == "standard"
    assert all(len(d["seed"]) == 3 for d in export["per_seed"].values())


def test_the_preset_is_the_fastest_arm_of_the_committed_race():
    winner = sr.fastest_arm(committed()["per_seed"])
    assert winner is not None, "no arm of the committed race reaches the target in every seed"
    race, preset = race_config(winner), get_preset("speedrun")
    assert preset.model == race.model
    assert preset.data == race.data
    keep = {k: getattr(preset.train, k) for k in BOOKKEEPING}
    assert preset.train == replace(race.train, **keep)


def test_fastest_arm_reads_the_seed_means_of_arms_that_always_reach_the_target():
    per_seed = {
        "reference": {"cpu_s_to_target": [100.0, 100.0]},  # the yardstick, never an arm
        "baseline": {"cpu_s_to_target": [30.0, 34.0]},
        "quick-but-flaky": {"cpu_s_to_target": [10.0, None]},
        "muon": {"cpu_s_to_target": [29.0, 34.0]},
    }
    assert sr.fastest_arm(per_seed) == "muon"
    per_seed["muon"]["cpu_s_to_target"] = [36.0, 29.0]
    assert sr.fastest_arm(per_seed) == "baseline"
    assert sr.fastest_arm({"reference": {"cpu_s_to_target": [1.0]},
                           "a": {"cpu_s_to_target": [None]}}) is None


def test_the_preset_is_listed_with_its_line():
    assert "speedrun" in PRESETS
    line = dict(describe_presets())["speedrun"]
    assert "speedrun" in line and "fastest" in line
