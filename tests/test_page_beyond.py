"""The page's "beyond: widening the stream" section in Chromium, live and exported.

Its experiment charts are drawn from a SYNTHETIC frontier.json (`synthetic_frontier`
below: made-up numbers in the format of depthlab/experiments/frontier.py's `page_data`,
documented in docs/residual-frontier.md), so the drawing is tested without training.
No number here is a result of the experiment. The composite gain chart's numbers come
from the server (depthlab.probes.simulator_mixing) and are checked against Python.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from page_harness import BROWSER_MARKS, VISIBLE_TEXT, open_section, stray_latin

pytestmark = BROWSER_MARKS

ARMS_12 = ("plain", "scaled", "rezero", "hc", "mhc", "attnres")
ARMS_48 = ("deepnorm", "post-ln")
STREAMS = 4


def _doubly_stochastic(rng: random.Random, n: int) -> list[list[float]]:
    m = [[math.exp(rng.gauss(0, 0.5)) for _ in range(n)] for _ in range(n)]
    for _ in range(50):  # Sinkhorn, to a synthetic doubly stochastic matrix
        m = [[v / sum(r) for v in r] for r in m]
        cols = [sum(r[j] for r in m) for j in range(n)]
        m = [[v / cols[j] for j, v in enumerate(r)] for r in m]
    return m


def _product_gain(mats: list[list[list[float]]]) -> float:
    n = len(mats[0])
    p = [[float(i == j) for j in range(n)] for i in range(n)]
    for m in mats:
        p = [[sum(p[i][k] * m[k][j] for k in range(n)) for j in range(n)] for i in range(n)]
    return max(max(abs(sum(r)) for r in p), max(abs(sum(r[j] for r in p)) for j in range(n)))


def synthetic_frontier(seed: int = 0) -> dict:
    """SYNTHETIC: frontier.json's shape with made-up numbers (3 seeds, 12 and 48 layers)."""
    rng = random.Random(seed)
    arms = {}
    for depth, names in ((12, ARMS_12), (48, ARMS_48)):
        for i, arm in enumerate(names):
            finals = [round(2.4 + 0.05 * i + rng.uniform(-0.02, 0.02), 4) for _ in range(3)]
            if arm == "post-ln":
                finals = [3.31, 3.30, 3.32]
            mean = sum(finals) / 3
            arms[f"L{depth}-{arm}"] = {
                "arm": arm, "depth": depth, "label": arm, "color": "#" + f"{rng.randrange(0x1000000):06x}",
                "warmup": depth == 12, "final_val_loss": finals, "mean": mean,
                "spread": (max(finals) - min(finals)) / 2,
                "val_curve": {"step": [0, 50, 100], "loss": [5.5, 3.0, mean]},
                "train_curve": {"step": [0, 50, 100], "loss": [5.5, 3.1, mean + 0.1]},
                "stream_rms_trained": [1.0 + 0.3 * k * (1 + 0.1 * i) for k in range(2 * depth + 1)],
                "grad_per_block_init": [10 ** (-0.05 * (depth - b) * (i + 1) / 3) for b in range(depth)],
                "grad_per_block_trained": [0.5 + 0.01 * b + 0.02 * i for b in range(depth)],
            }
    hc = [[[float(i == j) + rng.gauss(0, 0.15) for j in range(STREAMS)] for i in range(STREAMS)]
          for _ in range(24)]
    mhc = [_doubly_stochastic(rng, STREAMS) for _ in range(24)]
    sub = lambda w: f"blocks.{w // 2}.{'attn' if w % 2 == 0 else 'mlp'}_residual"
    depth_weights = []
    for w in range(24):
        raw = [math.exp(rng.gauss(0, 1)) for _ in range(w + 1)]
        depth_weights.append({"name": sub(w), "weights": [v / sum(raw) for v in raw]})
    learned = {
        "L12-hc": {"seed": 0, "mixing": [{"name": sub(w), "matrix": m, "read": [1, 0, 0, 0],
                                          "write": [1, 1, 1, 1]} for w, m in enumerate(hc)],
                   "depth_weights": [], "composite_gain": _product_gain(hc)},
        "L12-mhc": {"seed": 0, "mixing": [{"name": sub(w), "matrix": m, "read": [0.5] * 4,
                                           "write": [1.0] * 4} for w, m in enumerate(mhc)],
                    "depth_weights": [], "composite_gain": _product_gain(mhc)},
        "L12-attnres": {"seed": 0, "mixing": [], "depth_weights": depth_weights},
    }
    return {"seeds": 3, "baselines": {"unigram": 3.3045, "bigram": 2.91, "tokens": 1000, "windows": 4},
            "timing": {}, "learned": learned, "arms": arms}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A runs folder with no experiment: the section starts without frontier.json."""
    return tmp_path_factory.mktemp("runs-beyond")


def _write_frontier(runs) -> dict:
    data = synthetic_frontier()
    (runs / "residual-frontier").mkdir(exist_ok=True)
    (runs / "residual-frontier" / "frontier.json").write_text(json.dumps(data), encoding="utf-8")
    return data


def _check_drawn(page, data: dict, rel: float = 1e-12) -> None:
    """Every experiment chart holds the fixture's numbers, and its reading says them
    (a static copy rounds them to 4 significant digits: rel=1e-3)."""
    charts = page.evaluate("() => DL.charts.all()")
    loss = charts["c-bx-loss-12"]
    assert loss["error"] is None and loss["draws"] > 0
    assert loss["ys"][0] == pytest.approx([data["arms"][f"L12-{a}"]["mean"] for a in ARMS_12], rel=rel)
    best = min(ARMS_12, key=lambda a: data["arms"][f"L12-{a}"]["mean"])
    assert page.get_attribute("#reading-bx-loss-12", "data-best") == best
    assert {"c-bx-loss-48", "c-bx-rms-48", "c-bx-grad0-48", "c-bx-grad1-48"} <= set(charts)
    rms = charts["c-bx-rms-12"]
    assert rms["ys"][0] == pytest.approx(data["arms"]["L12-plain"]["stream_rms_trained"], rel=rel)
    assert rms["xs"][0] == 0 and len(rms["xs"]) == 25
    grad = charts["c-bx-grad0-12"]
    ratio = {a: data["arms"][f"L12-{a}"]["grad_per_block_init"][0]
             / data["arms"][f"L12-{a}"]["grad_per_block_init"][-1] for a in ARMS_12}
    assert page.get_attribute("#reading-bx-grad0-12", "data-lo") == min(ratio, key=ratio.get)
    assert grad["xs"][0] == 1 and "c-bx-grad1-12" in charts
    # heatmaps: one 4 x 4 grid of cells per write, the reading's gain from the data
    assert page.locator("#hm-L12-hc rect").count() == 24 * 16
    assert page.locator("#hm-L12-mhc rect").count() == 24 * 16
    assert float(page.get_attribute("#reading-bx-mix-L12-hc", "data-gain")) == pytest.approx(
        data["learned"]["L12-hc"]["composite_gain"], rel=rel)
    weights = data["learned"]["L12-attnres"]["depth_weights"]
    assert page.locator("#hm-depth-L12-attnres rect").count() == 24 * 24
    last = weights[-1]["weights"]
    assert int(page.get_attribute("#reading-bx-depth-L12-attnres", "data-source")) == last.index(max(last))
    # hover read-outs: a chart's tip and a heatmap cell's line
    page.locator("#c-bx-loss-12").scroll_into_view_if_needed()
    box = page.locator("#c-bx-loss-12 .u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5 / 6, box["y"] + box["height"] * 0.5)
    tip = page.locator("#c-bx-loss-12 .chart-tip")
    tip.wait_for(state="visible")
    assert page.evaluate("(a) => DL.t('bx.arm.' + a)", ARMS_12[0]) in tip.inner_text()
    page.locator("#hm-L12-mhc rect").first.hover()
    assert page.inner_text("#hm-L12-mhc-ro") != ""


def test_composite_gain_route_equals_python(live, browser):
    from depthlab.probes.mixing import gains_over_depth, random_mixing
    from depthlab.probes.simulator_mixing import composite_curves

    page, watch = open_section(browser, live + "#lang=en", "beyond")
    drawn = page.evaluate("() => DL.charts.all()['c-composite']")
    want = composite_curves().to_json()
    assert drawn["xs"] == want["depth"] == list(range(1, 61))
    assert drawn["ys"][0] == pytest.approx(want["hc"]["median"], rel=1e-12)
    assert drawn["ys"][1] == pytest.approx(want["mhc"]["median"], rel=1e-12)
    # one draw by hand: the curve's seed-0 values are among the draws the band spans
    one = gains_over_depth(random_mixing(4, 60, 0.2, 0, constrained=False))
    assert all(lo - 1e-12 <= v <= hi + 1e-12 for v, lo, hi in zip(one, want["hc"]["lo"], want["hc"]["hi"], strict=True))
    # HC explodes, mHC stays at 1 (Sinkhorn's eps aside)
    assert want["hc"]["median"][-1] > 10 * want["hc"]["median"][0]
    assert max(abs(v - 1) for v in want["mhc"]["hi"] + want["mhc"]["lo"]) < 1e-3
    reading = page.inner_text("#reading-composite")
    assert page.evaluate("(v) => DL.fmt(v)", want["hc"]["median"][-1]) in reading
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()


def test_section_without_frontier_says_how_to_run(live, browser, runs):
    assert not (runs / "residual-frontier" / "frontier.json").exists()
    for lang in ("en", "zh"):
        page, watch = open_section(browser, live + f"#lang={lang}", "beyond")
        assert "depthlab experiment residual-frontier --budget quick" in page.inner_text("#bx-exp pre")
        assert page.locator("#bx-exp canvas").count() == 0
        assert page.locator("#bx-sim a.bx-try").count() == 5
        assert watch.errors == [] and page.evaluate("() => DL.errors") == []
        page.close()


def test_try_links_set_the_simulator(live, browser):
    page, watch = open_section(browser, live + "#lang=en", "beyond")
    page.click("#bx-sim a.bx-try[data-residual=mhc]")
    page.wait_for_function("() => DL.state.get().residual === 'mhc' && DL.state.get().n === 64")
    page.wait_for_function("() => document.getElementById('ro-improved').dataset.n === '64'", timeout=30000)
    assert "residual=mhc" in page.url and "norm=rmsnorm" in page.url
    assert "preᵀH" in page.inner_text("#improved-formula")
    page.click("#bx-sim a.bx-try[data-residual=deepnorm]")
    page.wait_for_function("() => document.getElementById('improved-formula').textContent.startsWith('x ← RMSNorm(α·x')")
    assert "after the add" in page.inner_text("#t-norm-label")
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_section_with_synthetic_frontier_live(lang, live, browser, runs):
    from axe_playwright_python.sync_playwright import Axe

    data = _write_frontier(runs)
    page, watch = open_section(browser, live + f"#lang={lang}", "beyond")
    _check_drawn(page, data)
    if lang == "zh":
        # this section's text (the other sections are checked by test_page_lang_a11y.py)
        section = VISIBLE_TEXT.replace("createTreeWalker(document.body", "createTreeWalker(document.getElementById('beyond')")
        assert section != VISIBLE_TEXT
        bad = stray_latin(page.evaluate(section))
        assert sorted(set(bad)) == [], "\n".join(sorted(set(bad)))
    results = Axe().run(page)
    serious = [(v["id"], [n["target"] for n in v["nodes"]][:3])
               for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert serious == []
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()


def test_section_in_the_static_export(browser, runs, tmp_path_factory):
    from depthlab.web.export import export_page

    data = _write_frontier(runs)
    url = export_page(tmp_path_factory.mktemp("export-beyond"), runs_dir=runs, grid="small").as_uri()
    for lang in ("en", "zh"):
        page, watch = open_section(browser, url + f"#lang={lang}", "beyond")
        _check_drawn(page, data, rel=1e-3)
        assert page.evaluate("() => DL.charts.all()['c-composite'].xs.length") == 60
        assert watch.errors == [] and page.evaluate("() => DL.errors") == []
        page.close()


@pytest.fixture(scope="module")
def micro_frontier(tmp_path_factory):
    """A REAL frontier.json: the residual-frontier experiment's micro budget (3 and 6
    layers, a few steps) with the arms the section draws heatmaps for, about 20 s."""
    import os
    from dataclasses import replace

    from depthlab.experiments import EXPERIMENTS, run_experiment
    from depthlab.experiments import frontier as f

    out = tmp_path_factory.mktemp("runs-micro-frontier")
    only = ("plain", "hc", "mhc", "attnres")
    before, cache = EXPERIMENTS[f.EXPERIMENT.name], os.environ.get("DEPTHLAB_CACHE")
    os.environ["DEPTHLAB_CACHE"] = str(out / "cache")
    EXPERIMENTS[f.EXPERIMENT.name] = replace(
        f.EXPERIMENT, grid=lambda base, b, seeds: f.grid(base, b, seeds, only=only))
    try:
        corpus = str(Path(__file__).parent / "data" / "tiny_shakespeare.txt")
        root = run_experiment(f.EXPERIMENT.name, budget="micro", out_dir=out / "runs", corpus=corpus,
                              progress=False, echo=False)
    finally:
        EXPERIMENTS[f.EXPERIMENT.name] = before
        if cache is None:
            os.environ.pop("DEPTHLAB_CACHE", None)
        else:
            os.environ["DEPTHLAB_CACHE"] = cache
    # the page is served on the experiment's two files alone: its trained runs would also
    # be offered to the real-model section, which is not what this test is about
    page_runs = out / "page" / root.name
    page_runs.mkdir(parents=True)
    for name in ("export.json", "frontier.json"):
        (page_runs / name).write_bytes((root / name).read_bytes())
    return page_runs.parent, json.loads((root / "frontier.json").read_text(encoding="utf-8"))


def test_section_draws_a_real_micro_frontier(micro_frontier, browser):
    from page_harness import serve

    runs_dir, data = micro_frontier
    url, stop = serve(runs_dir)
    try:
        page, watch = open_section(browser, url + "#lang=en", "beyond")
        charts = page.evaluate("() => DL.charts.all()")
        for depth in {a["depth"] for a in data["arms"].values()}:
            for kind in ("loss", "rms", "grad0", "grad1"):
                chart = charts[f"c-bx-{kind}-{depth}"]
                assert chart["error"] is None and chart["draws"] > 0 and chart["label"]
            plain = data["arms"][f"L{depth}-plain"]
            assert charts[f"c-bx-loss-{depth}"]["ys"][0][0] == pytest.approx(plain["mean"], rel=1e-12)
        for key, entry in data["learned"].items():
            cells = sum(len(m["matrix"]) ** 2 for m in entry["mixing"])
            assert page.locator(f"#hm-{key} rect").count() == cells
            if entry["depth_weights"]:
                k = max(len(r["weights"]) for r in entry["depth_weights"])
                assert page.locator(f"#hm-depth-{key} rect").count() == len(entry["depth_weights"]) * k
        assert any(e["mixing"] for e in data["learned"].values())
        assert watch.errors == [] and page.evaluate("() => DL.errors") == []
        page.close()
    finally:
        stop()
