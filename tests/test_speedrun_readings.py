"""The page's race section (depthlab.experiments.speedrun_readings, /api/speedrun): known
answers on a small hand-made export with 3 seeds, the quick race's real one-seed export
(docs/results/speedrun-quick, written before the section existed) and what the API says
when the export is missing, unreadable or lacks what the section draws."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from depthlab.experiments.speedrun import learned_chart_id
from depthlab.experiments.speedrun_readings import section
from depthlab.web.app import create_app

QUICK = Path(__file__).resolve().parent.parent / "docs" / "results" / "speedrun-quick" / "export.json"


def _arm(cpu: list, steps: list, finals: list, ref_cpu: float = 10.0, target: float = 2.1) -> dict:
    return {"seed": [0, 1, 2], "final_val_loss": finals, "completed": [True] * 3, "steps": 200,
            "target": target, "reference_cpu_s": ref_cpu, "steps_to_target": steps,
            "tokens_to_target": [None if s is None else 64 * s for s in steps],
            "cpu_s_to_target": cpu,
            "ratio_to_reference": [None if c is None else c / ref_cpu for c in cpu],
            "cpu_s_total": [20.0, 20.0, 20.0]}


def _series(label: str, x: list, y: list) -> dict:
    return {"label": label, "x": x, "y": y, "color": "#000000", "dash": False}


def small_export() -> dict:
    """Made-up numbers, 3 seeds: the reference ends at 2.0 / 2.1 / 2.2 (target 2.1, so its
    third seed never reaches it), its recipe 10 CPU-seconds; U-net skips beats the course
    preset beyond the spread, Muon and x0 mixing do not, the softcap reaches the target in
    2 seeds of 3, nGPT in none."""
    per_seed = {
        "reference": _arm([10.0, 10.0, None], [200, 200, None], [2.0, 2.1, 2.2]),
        "baseline": _arm([4.0, 4.2, 4.4], [100, 100, 100], [1.8, 1.8, 1.8]),
        "muon": _arm([4.0, 4.5, 5.0], [100, 100, 120], [1.75, 1.75, 1.75]),
        "x0-mix": _arm([5.0, 5.0, 5.0], [120, 120, 120], [1.9, 1.9, 1.9]),
        "unet-skips": _arm([3.0, 3.1, 3.2], [80, 80, 80], [1.7, 1.7, 1.7]),
        "softcap": _arm([3.0, None, 3.5], [80, None, 90], [1.9, 2.2, 1.95]),
        "ngpt": _arm([None] * 3, [None] * 3, [2.5, 2.6, 2.7]),
    }
    curves = [_series(f"arm {a}", [0.0, 2.0, 4.0] if a != "ngpt" else [0.0, 3.0], [4.0, 3.0, 2.0][:3 if a != "ngpt" else 2])
              for a in per_seed]
    curves.append(_series("target (2.1000)", [0, 4.0], [2.1, 2.1]))
    x0 = learned_chart_id("x0-mix", "x0_mix_x0")
    unet = learned_chart_id("unet-skips", "unet_skip_weight")
    charts = [
        {"id": "val_loss_cpu", "series": curves},
        {"id": x0, "series": [_series(f"layer {i}", [0, 10, 20], [s, (s + e) / 2, e]) for i, (s, e)
                              in enumerate([(0.2, 0.3), (0.15, 0.2), (0.1, 0.05), (0.05, 0.01)])]},
        {"id": unet, "series": [_series("layer 2", [0, 10, 20], [1.0, 0.95, 0.9]),
                                _series("layer 3", [0, 10, 20], [1.0, 1.1, 1.2])]},
    ]
    return {"experiment": "speedrun", "budget": "standard", "seeds": [0, 1, 2],
            "exported_at": "2026-12-02T00:00:00Z", "charts": charts, "per_seed": per_seed}


def test_the_leaderboard_of_a_small_race():
    board = section(small_export())["board"]
    # every seed at the target first, by mean CPU seconds; then some seeds; then none
    assert [r["arm"] for r in board] == ["unet-skips", "baseline", "muon", "x0-mix", "softcap",
                                         "reference", "ngpt"]
    assert [r["rank"] for r in board] == [1, 2, 3, 4, None, None, None]
    unet = board[0]
    assert unet["cpu_mean"] == pytest.approx(3.1, rel=1e-12)
    assert unet["cpu_spread"] == pytest.approx(0.1, rel=1e-9)
    assert (unet["ratio_lo"], unet["ratio_hi"]) == pytest.approx((0.3, 0.32), rel=1e-12)
    assert unet["steps_mean"] == 80 and unet["at_target"] == 3 and unet["pays"] is True
    assert [r["role"] for r in board if r["role"]] == ["baseline", "reference"]
    softcap = next(r for r in board if r["arm"] == "softcap")
    assert softcap["at_target"] == 2 and softcap["ratio"][1] is None and softcap["pays"] is False
    ngpt = board[-1]
    assert ngpt["cpu_mean"] is None and ngpt["ratio_mean"] is None and ngpt["at_target"] == 0


def test_the_readings_of_a_small_race():
    r = section(small_export())["readings"]
    assert r["sr-board"]["fastest"] == "unet-skips" and r["sr-board"]["pays"] is True
    assert r["sr-board"]["text"]["en"] == (
        "Fastest to the target: + U-net skips, 3.1 ± 0.1 CPU-seconds, 0.31 ± 0.01× the reference's "
        "(the goal is at most 0.35×: met); faster than the course preset (4.2 ± 0.2) and in fewer "
        "steps (80 ± 0 against 100 ± 0), each beyond the seed spread.")
    assert r["sr-board"]["text"]["zh"].startswith("最快达到目标的是加 U-net 跳连：3.1 ± 0.1 CPU 秒")
    # Muon: 4.5 ± 0.5 against 4.2 ± 0.2, within the spread; x0 mixing slower; softcap and
    # nGPT do not reach the target in every seed
    assert (r["sr-pay"]["paid"], r["sr-pay"]["unpaid"]) == (["unet-skips"], ["muon", "x0-mix", "softcap", "ngpt"])
    assert r["sr-pay"]["text"]["en"] == (
        "Alone, these do not pay at this scale (3 seeds: fewer steps and less CPU time, each beyond "
        "the seed spread): + Muon on the "
        "hidden matrices, + embedding shortcut (x0 mixing), + logit softcap 15, nGPT (normalised "
        "Transformer). These pay: + U-net skips.")
    assert r["sr-curves"]["reached"] == 4 and r["sr-curves"]["lowest"] == "unet-skips"
    assert r["sr-curves"]["text"]["en"] == (
        "4 of 6 arms reach the target (2.1) in every seed; not reaching it: + logit softcap 15, nGPT "
        "(normalised Transformer). Lowest validation loss at the end of its run: + U-net skips, 1.7 "
        "(the course preset: 1.8).")
    x0 = r["sr-learned-x0-mix-x0_mix_x0"]
    assert (x0["hi"], x0["lo"], x0["up"]) == (0, 3, 2)
    assert x0["text"]["en"] == (
        "In the + embedding shortcut (x0 mixing) arm at step 20, layer 0 leans on the embedding "
        "shortcut most (0.3, from 0.2), layer 3 least (0.01, from 0.05); 2 of 4 layers lean on it "
        "more than at the start.")
    unet = r["sr-learned-unet-skips-unet_skip_weight"]
    assert (unet["hi"], unet["lo"], unet["up"]) == (3, 2, 1)
    assert "highest at layer 3 (1.2, from 1), lowest at layer 2 (0.9, from 1); 1 of 2" in unet["text"]["en"]


def test_curves_share_one_x_axis_and_learned_values_keep_their_layers():
    s = section(small_export())
    c = s["curves"]
    assert c["x"] == [0.0, 2.0, 3.0, 4.0] and c["target"] == 2.1
    # the series' own labels are not the arms' words: they are taken in the arms' order
    assert [line["arm"] for line in c["lines"]] == list(small_export()["per_seed"])
    ngpt = c["lines"][-1]
    assert ngpt["y"] == [4.0, None, 3.0, None]
    unet = next(e for e in s["learned"] if e["key"] == "unet_skip_weight")
    assert (unet["layers"], unet["start"], unet["end"]) == ([2, 3], [1.0, 1.0], [0.9, 1.2])
    assert (unet["start_step"], unet["end_step"]) == (0, 20)


def test_a_single_seed_claims_nothing_from_cpu_time_alone():
    """The quick race (one seed): U-net skips is fastest, 11.44 CPU-seconds, 0.258x the
    reference's 44.31, at the same step as the course preset (100): no difference claimed."""
    data = json.loads(QUICK.read_text(encoding="utf-8"))
    s = section(data)
    board = s["board"]
    assert board[0]["arm"] == "unet-skips" and board[-1]["arm"] == "reference"
    assert board[0]["cpu_mean"] == pytest.approx(data["per_seed"]["unet-skips"]["cpu_s_to_target"][0], rel=1e-12)
    read = s["readings"]["sr-board"]
    assert read["fastest"] == "unet-skips" and read["pays"] is False
    assert read["text"]["en"] == (
        "Fastest to the target: + U-net skips, 11.4 CPU-seconds, 0.26× the reference's (the goal is at "
        "most 0.35×: met); against the course preset's 12.9 in 100 steps against 100: one seed, no "
        "spread measured, and one run's CPU time moves with the machine's load, so no difference is claimed.")
    assert s["readings"]["sr-pay"]["paid"] == []
    # the series are matched to arms by their words: each line is its arm's
    labels = {line["arm"]: line["label"]["en"] for line in s["curves"]["lines"]}
    assert labels["ngpt"] == "nGPT (normalised Transformer)"
    x0 = s["readings"]["sr-learned-x0-mix-x0_mix_x0"]
    assert (x0["hi"], x0["lo"], x0["up"]) == (0, 3, 3)
    assert {e["key"] for e in s["learned"]} >= {"x0_mix_resid", "backout_lambda", "ngpt_alpha_mlp"}


@pytest.fixture()
def client(tmp_path):
    return TestClient(create_app(tmp_path / "runs", warm=False)), tmp_path / "runs"


def test_api_speedrun_absent_present_corrupt_and_incomplete(client):
    c, runs = client
    r = c.get("/api/speedrun")
    assert r.status_code == 200
    assert r.json() == {"has_data": False, "race": None,
                        "command": f"depthlab experiment speedrun --budget quick --out {runs}"}
    folder = runs / "speedrun"
    folder.mkdir(parents=True)
    shutil.copy(QUICK, folder / "export.json")
    body = c.get("/api/speedrun").json()
    assert body["has_data"] is True and body["race"]["readings"]["sr-board"]["fastest"] == "unet-skips"
    assert [row["arm"] for row in body["race"]["board"]][:3] == ["unet-skips", "softcap", "baseline"]
    (folder / "export.json").write_text('{"per_seed": {', encoding="utf-8")  # cut short
    body = c.get("/api/speedrun").json()
    assert body["has_data"] is False and "is not a readable JSON object" in body["error"]
    (folder / "export.json").write_text('{"experiment": "speedrun"}', encoding="utf-8")
    body = c.get("/api/speedrun").json()
    assert body["has_data"] is False and "lacks what the page draws" in body["error"]
