"""`--preset speedrun` is the design the committed standard race found fastest, trained
as the race trained it: a rerun of the race with another winner, or a change to the
preset or to the arms' table, fails here until the other follows."""

import json
from dataclasses import replace
from pathlib import Path

from depthlab.experiments import BUDGETS
from depthlab.experiments import speedrun as sr
from depthlab.experiments.spec import base_config
from depthlab.experiments.speedrun_readings import race as committed_race
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
    winner = committed_race(committed()["per_seed"]).fastest()
    assert winner is not None, "no arm of the committed race reaches the target in every seed"
    race, preset = race_config(winner), get_preset("speedrun")
    assert preset.model == race.model
    assert preset.data == race.data
    keep = {k: getattr(preset.train, k) for k in BOOKKEEPING}
    assert preset.train == replace(race.train, **keep)


def test_fastest_arm_reads_the_seed_means_of_arms_that_always_reach_the_target():
    def hits(*cpus):
        return [sr.Hit(None if c is None else 100, None, c, 60.0, 500, 1.8) for c in cpus]

    times = {
        sr.REFERENCE: (100.0, 100.0),  # the yardstick, never an arm
        "baseline": (30.0, 34.0),
        "quick-but-flaky": (10.0, None),
        "muon": (29.0, 34.0),
    }
    assert sr.Race(2.0, 100.0, {a: hits(*c) for a, c in times.items()}).fastest() == "muon"
    times["muon"] = (36.0, 29.0)
    assert sr.Race(2.0, 100.0, {a: hits(*c) for a, c in times.items()}).fastest() == "baseline"
    assert sr.Race(2.0, 1.0, {sr.REFERENCE: hits(1.0), "a": hits(None)}).fastest() is None


def test_the_preset_is_listed_with_its_line():
    assert "speedrun" in PRESETS
    line = dict(describe_presets())["speedrun"]
    assert "speedrun" in line and "fastest" in line
