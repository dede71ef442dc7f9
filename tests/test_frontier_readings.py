"""The beyond section's readings, computed once in Python (frontier_readings) and shipped
with frontier.json: known answers on a small hand-made file, a file written before the
readings existed gets them when the server reads it, and `sig` writes numbers as the
page's DL.fmt does (tests/test_page_readings_parity.py runs both in Chromium)."""

from __future__ import annotations

import json
import math

import pytest

from depthlab.experiments.frontier_readings import complete, readings
from depthlab.sigfig import sig, to_precision
from depthlab.web.runs import FRONTIER, Runs


def _arm(name: str, depth: int, finals: list, rms: list, grad: list) -> dict:
    ok = [v for v in finals if v is not None]
    mean = sum(ok) / len(ok) if ok and len(ok) == len(finals) else None
    return {"arm": name, "depth": depth, "label": name, "color": "#000000", "warmup": True,
            "final_val_loss": finals, "mean": mean, "spread": 0.01,
            "val_curve": {"step": [], "loss": []}, "train_curve": {"step": [], "loss": []},
            "stream_rms_trained": rms, "grad_per_block_init": grad, "grad_per_block_trained": grad}


def small_frontier() -> dict:
    """Made-up numbers: plain and scaled at 2 layers (scaled lower), a diverged hc."""
    arms = {"L2-plain": _arm("plain", 2, [2.5, 2.25], [1.0, 2.0, 4.0], [1.0, 0.5]),
            "L2-scaled": _arm("scaled", 2, [2.0, 2.5], [1.0, 1.5, 3.0], [2.0, 0.5]),
            "L2-hc": _arm("hc", 2, [None, 2.0], [1.0, 9.0], [1.0, 0.0])}
    mixing = [{"name": "blocks.0.attn_residual", "matrix": [[1.0, 0.0], [0.25, 0.5]]},
              {"name": "blocks.0.mlp_residual", "matrix": [[0.5, 0.5], [0.5, 0.5]]}]
    depth = [{"name": "blocks.0.attn_residual", "weights": [1.0]},
             {"name": "blocks.0.mlp_residual", "weights": [0.25, 0.5, 0.25]}]
    return {"seeds": 2, "baselines": {"unigram": 3.30449, "bigram": 2.9}, "timing": {},
            "learned": {"L2-hc": {"seed": 0, "mixing": mixing, "depth_weights": [],
                                  "composite_gain": 1.5},
                        "L2-attnres": {"seed": 0, "mixing": [], "depth_weights": depth}},
            "arms": arms}


def test_the_readings_of_a_small_frontier():
    r = readings(small_frontier())
    assert set(r) == {"bx-loss-2", "bx-rms-2", "bx-grad0-2", "bx-grad1-2", "bx-mix-L2-hc",
                      "bx-depth-L2-attnres"}
    # loss: hc has no mean (a diverged seed); scaled 2.25 and plain 2.375
    assert r["bx-loss-2"]["best"] == "scaled"
    assert r["bx-loss-2"]["text"]["en"] == ("At 2 layers the lowest mean is scaled, 2.25 ± 0.01 over 2 "
                                            "seed(s); plain 2.375 ± 0.01; unigram 3.304, bigram 2.9.")
    # RMS after the last write: plain 4, scaled 3, hc 9
    assert (r["bx-rms-2"]["lo"], r["bx-rms-2"]["hi"]) == ("scaled", "hc")
    assert "from 3 (scaled) to 9 (HC)" in r["bx-rms-2"]["text"]["en"]
    # gradient bottom / top: plain 2, scaled 4, hc 1/0 left out
    assert (r["bx-grad0-2"]["lo"], r["bx-grad0-2"]["hi"]) == ("plain", "scaled")
    # mixing: row sums 1, 0.75, 1, 1; column sums 1.25, 0.5, 1, 1 -> 0.5 off; the farthest
    # entry from the identity is (1, 1) of the first matrix (0.5, before the 0.5s of the second)
    mix = r["bx-mix-L2-hc"]
    assert mix["gain"] == 1.5
    assert mix["text"]["en"] == ("HC: composite gain over 2 writes 1.5; rows and columns sum to 1 within "
                                 "0.5; the largest departure from the identity is 0.5 at "
                                 "blocks.0.attn_residual, entry (1, 1).")
    assert r["bx-depth-L2-attnres"]["source"] == 1
    assert "source 1, 0.5 (uniform would be 0.333)" in r["bx-depth-L2-attnres"]["text"]["en"]
    for reading in r.values():
        assert set(reading["text"]) == {"en", "zh"} and "{" not in reading["text"]["zh"]


def test_no_finite_loss_and_no_plain_say_so():
    f = small_frontier()
    del f["arms"]["L2-plain"]
    assert "unigram" in readings(f)["bx-loss-2"]["text"]["en"]
    assert "plain" not in readings(f)["bx-loss-2"]["text"]["en"].split(";")[1]
    f["arms"] = {"L2-hc": f["arms"]["L2-hc"]}
    assert readings(f)["bx-loss-2"] == {"text": readings(f)["bx-loss-2"]["text"], "best": ""}
    assert readings(f)["bx-loss-2"]["text"]["en"] == "At 2 layers no arm has a finite final loss."


def test_complete_adds_the_seed_range_and_keeps_a_complete_file():
    done = complete(small_frontier())
    assert (done["arms"]["L2-plain"]["lo"], done["arms"]["L2-plain"]["hi"]) == (2.25, 2.5)
    assert (done["arms"]["L2-hc"]["lo"], done["arms"]["L2-hc"]["hi"]) == (2.0, 2.0)
    assert complete(done) is done


def test_the_server_completes_an_older_frontier_json(tmp_path):
    (tmp_path / FRONTIER).mkdir()
    (tmp_path / FRONTIER / "frontier.json").write_text(json.dumps(small_frontier()), encoding="utf-8")
    got = Runs(tmp_path).frontier()
    assert got["has_data"] and got["frontier"]["readings"] == readings(complete(small_frontier()))
    assert got["frontier"]["arms"]["L2-scaled"]["lo"] == 2.0


@pytest.mark.parametrize(("v", "digits", "want"), [
    (0.0, 3, "0"), (1.0, 3, "1"), (2.5, 4, "2.5"), (-0.5, 3, "-0.5"), (3.14159, 3, "3.14"),
    (1.25, 2, "1.3"),  # a tie in binary: rounded half up, as JavaScript's toPrecision
    (9999.7, 3, "10000"), (12345.0, 3, "1.2 × 10⁴"), (12345.0, 4, "1.23 × 10⁴"),
    (0.00012, 3, "1.2 × 10⁻⁴"), (-3e-5, 3, "-3.0 × 10⁻⁵"), (0.0009996, 3, "1.0 × 10⁻³"),
    (None, 3, "—"), (math.inf, 3, "—"), (math.nan, 2, "—")])
def test_sig_known_answers(v, digits, want):
    assert sig(v, digits) == want


def test_to_precision_layouts():
    assert [to_precision(x, 3) for x in (0.0, 123456.0, 1e-7, 0.000123456, 99.96)] == [
        "0.00", "1.23e+5", "1.00e-7", "0.000123", "100"]
