"""The page's race section ("How the field trains the stream today", static/js/race.js) in
Chromium, live and exported: drawn from the quick race's real export
(docs/results/speedrun-quick, one seed) in English and Chinese, each chart holding the
server's numbers (depthlab.experiments.speedrun_readings) and each reading its sentence,
the zh section without English words, and without an export the command that writes it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from page_harness import BROWSER_MARKS, VISIBLE_TEXT, open_section, stray_latin

pytestmark = BROWSER_MARKS

QUICK = Path(__file__).resolve().parent.parent / "docs" / "results" / "speedrun-quick" / "export.json"
# the section's visible text only (the other sections are checked by test_page_lang_a11y.py)
SECTION_TEXT = VISIBLE_TEXT.replace("createTreeWalker(document.body", "createTreeWalker(document.getElementById('race')") \
    .replace('document.querySelectorAll("[role=img]', 'document.getElementById("race").querySelectorAll("[role=img]')


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A runs folder with no experiment: the section starts without the speedrun export."""
    return tmp_path_factory.mktemp("runs-race")


def _write_export(runs: Path) -> dict:
    from depthlab.experiments.speedrun_readings import section

    (runs / "speedrun").mkdir(exist_ok=True)
    shutil.copy(QUICK, runs / "speedrun" / "export.json")
    return section(json.loads(QUICK.read_text(encoding="utf-8")))


def _same(drawn: list, want: list, rel: float) -> bool:
    """Equal lists of numbers within rel, None (a gap) where the other has None."""
    return len(drawn) == len(want) and all(
        (a is None and b is None) or (a is not None and b is not None and a == pytest.approx(b, rel=rel))
        for a, b in zip(drawn, want, strict=True))


def _check_drawn(page, want: dict, lang: str, rel: float = 1e-12) -> None:
    """Every chart holds the server's numbers and every reading its sentence (a static copy
    rounds numbers to 4 significant digits: rel=1e-3)."""
    charts = page.evaluate("() => DL.charts.all()")
    rows = want["board"]
    board = charts["c-sr-board"]
    assert board["error"] is None and board["draws"] > 0
    assert board["xs"] == list(range(1, len(rows) + 1))
    mean = [None if r["role"] else r["ratio_mean"] for r in rows]
    assert _same(board["ys"][0], mean, rel)
    at = [i for i, r in enumerate(rows) if r["role"] == "baseline"]
    assert [i for i, v in enumerate(board["ys"][1]) if v is not None] == at
    assert board["ys"][-2] == pytest.approx([want["goal"]] * len(rows))  # the goal, 0.35
    read = want["readings"]["sr-board"]
    assert page.get_attribute("#reading-sr-board", "data-fastest") == read["fastest"]
    assert page.inner_text("#reading-sr-board") == read["text"][lang]
    assert page.inner_text("#reading-sr-pay") == want["readings"]["sr-pay"]["text"][lang]
    assert page.inner_text("#reading-sr-curves") == want["readings"]["sr-curves"]["text"][lang]
    # the table: the board's order, the course preset and the reference marked
    arms = page.eval_on_selector_all("#sr-table tbody tr", "(rs) => rs.map((r) => r.dataset.arm)")
    assert arms == [r["arm"] for r in rows]
    assert page.locator("#sr-table tr[data-arm=baseline] .sr-mark-baseline").count() == 1
    assert page.locator("#sr-table tr[data-arm=reference] .sr-mark-reference").count() == 1
    curves = charts["c-sr-curves"]
    c = want["curves"]
    assert curves["xs"] == pytest.approx(c["x"], rel=rel)
    for drawn, line in zip(curves["ys"], c["lines"], strict=False):
        assert _same(drawn, line["y"], rel)
    assert curves["ys"][-1] == pytest.approx([c["target"]] * len(c["x"]), rel=rel)
    for e in want["learned"]:
        drawn = charts["c-" + e["id"]]
        assert drawn["error"] is None and drawn["xs"] == e["layers"]
        assert _same(drawn["ys"][0], e["start"], rel) and _same(drawn["ys"][1], e["end"], rel)
        r = want["readings"][e["id"]]
        assert page.get_attribute("#reading-" + e["id"], "data-hi") == str(r["hi"])
        assert page.inner_text("#reading-" + e["id"]) == r["text"][lang]
    # hover: the board chart's tip names the arm under the cursor
    page.locator("#c-sr-board").scroll_into_view_if_needed()
    box = page.locator("#c-sr-board .u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5 / len(rows), box["y"] + box["height"] * 0.5)
    tip = page.locator("#c-sr-board .chart-tip")
    tip.wait_for(state="visible")
    assert rows[0]["label"][lang] in tip.inner_text()


def _no_english(page) -> None:
    bad = stray_latin(page.evaluate(SECTION_TEXT))
    assert sorted(set(bad)) == [], "\n".join(sorted(set(bad)))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_without_the_export_the_section_says_how_to_run(lang, live, browser, runs):
    assert not (runs / "speedrun" / "export.json").exists()
    page, watch = open_section(browser, live + f"#lang={lang}", "race")
    assert page.inner_text("#sr-notrun") == page.evaluate("() => DL.t('sr.none')")
    assert f"depthlab experiment speedrun --budget quick --out {runs}" in page.inner_text("#race-body pre")
    assert page.locator("#race canvas").count() == 0
    if lang == "zh":
        _no_english(page)
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()


@pytest.mark.parametrize(("lang", "width"), [("en", 1400), ("zh", 390)])
def test_the_race_drawn_live(lang, width, live, browser, runs):
    from axe_playwright_python.sync_playwright import Axe

    want = _write_export(runs)
    page, watch = open_section(browser, live + f"#lang={lang}", "race", width)
    _check_drawn(page, want, lang)
    if lang == "zh":
        _no_english(page)
    # nothing of the section sticks out of a phone's screen (the table scrolls in its box)
    assert page.evaluate("() => document.getElementById('race').scrollWidth") <= width
    results = Axe().run(page, context="#race")
    serious = [(v["id"], [n["target"] for n in v["nodes"]][:3])
               for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert serious == []
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()


def test_the_race_in_the_static_export(browser, runs, tmp_path_factory, exported_small):
    from depthlab.web.export import export_page

    want = _write_export(runs)
    url = export_page(tmp_path_factory.mktemp("export-race"), runs_dir=runs, grid="small").as_uri()
    for lang in ("en", "zh"):
        page, watch = open_section(browser, url + f"#lang={lang}", "race")
        _check_drawn(page, want, lang, rel=1e-3)
        assert watch.errors == [] and page.evaluate("() => DL.errors") == []
        page.close()
    # a copy exported without the race says so, and how to make one
    page, watch = open_section(browser, exported_small + "#lang=zh", "race")
    assert page.inner_text("#sr-notrun") == page.evaluate("() => DL.t('sr.static')")
    assert "depthlab experiment speedrun --budget quick" in page.inner_text("#race-body pre")
    _no_english(page)
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()


def test_three_seeds_draw_each_seed_and_their_range(live, browser, runs):
    """A standard race has 3 seeds: each seed's ratio is a dot of its own and the mean's
    whisker spans them (made-up numbers: tests/test_speedrun_readings.py small_export)."""
    from test_speedrun_readings import small_export

    from depthlab.experiments.speedrun_readings import section

    data = small_export()
    (runs / "speedrun").mkdir(exist_ok=True)
    (runs / "speedrun" / "export.json").write_text(json.dumps(data), encoding="utf-8")
    want = section(data)
    page, watch = open_section(browser, live + "#lang=en", "race")
    board = page.evaluate("() => DL.charts.all()['c-sr-board']")
    rows = want["board"]
    assert len(board["ys"]) == 3 + 3 + 2  # mean, course preset, reference; 3 seeds; goal, 1x
    for s in range(3):
        assert _same(board["ys"][3 + s], [r["ratio"][s] for r in rows], 1e-12)
    lo, hi = board["bands"][0]
    assert _same(lo, [r["ratio_lo"] for r in rows], 1e-12) and _same(hi, [r["ratio_hi"] for r in rows], 1e-12)
    assert page.inner_text("#reading-sr-board") == want["readings"]["sr-board"]["text"]["en"]
    # mean ± spread in the table: U-net skips first, 3.1 ± 0.1 CPU-seconds
    first = page.inner_text("#sr-table tbody tr:first-child")
    assert "3.1 ± 0.1" in first and "3 of 3" in first
    assert "not reached" in page.inner_text("#sr-table tr[data-arm=ngpt]")
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()
