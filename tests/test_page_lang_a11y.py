"""The page speaks one language at a time and passes axe-core, live and exported.

The zh view's visible text (and the charts' text alternatives) may hold no Latin word
outside an allow-list: symbols and units, terms of the field that the Chinese text uses
as they are, model and author names, and code (inside <code>/<pre>, or identifiers with
a digit, an underscore or a dot). axe-core (axe-playwright-python) reports no serious or
critical violation in either language. Hover read-outs, the block diagram's data path,
the one-line readings and `?lang=` are checked here too."""

from __future__ import annotations

import pytest
from page_harness import (
    BROWSER_MARKS,
    POST_JSON,
    REALMODEL_SETTLED,
    VISIBLE_TEXT,
    Watch,
    stray_latin,
)

pytestmark = BROWSER_MARKS


@pytest.fixture(scope="module")
def exported(runs, tmp_path_factory):
    from depthlab.web.export import export_page

    return export_page(tmp_path_factory.mktemp("export"), runs_dir=runs, grid="small").as_uri()


def open_page(browser, url: str, width: int = 1400):
    page = browser.new_page(viewport={"width": width, "height": 900}, locale="en-US")
    watch = Watch(page)
    page.goto(url)
    page.wait_for_function("() => window.DL && DL.ready", timeout=20000)
    page.wait_for_selector("#exp-residual canvas", timeout=20000)
    page.wait_for_function("() => document.getElementById('reading-sim').textContent !== ''")
    page.wait_for_function(REALMODEL_SETTLED, timeout=60000)
    return page, watch


def test_allow_list_catches_english():
    assert stray_latin(["去掉残差后,4 and 12 层模型"]) == ["'and' in '去掉残差后,4 and 12 层模型'"]
    assert stray_latin(["RMSNorm 对 LayerNorm", "d_ff = 4d", "gpt2", "x ← x + F(x)"]) == []


@pytest.mark.parametrize("where", ["live", "exported"])
def test_zh_view_has_no_english(where, request, browser):
    base = request.getfixturevalue(where)
    # ?lang=zh works as well as #lang=zh
    page, watch = open_page(browser, base + ("?lang=zh" if where == "live" else "#lang=zh"), 390)
    assert page.evaluate("() => document.documentElement.lang") == "zh-CN"
    bad = stray_latin(page.evaluate(VISIBLE_TEXT))
    page.click("#mode-collapse")
    page.wait_for_function("() => document.getElementById('ro-plain').dataset.distance !== undefined")
    bad += stray_latin(page.evaluate(VISIBLE_TEXT))
    for preset in ("vaswani2017", "qwen_next"):  # the post-norm and the gated block
        page.select_option("#b-preset", preset)
        page.wait_for_function(f"() => document.getElementById('block-text').textContent.includes('{preset}')")
        bad += stray_latin(page.evaluate(VISIBLE_TEXT))
    assert sorted(set(bad)) == [], "\n".join(sorted(set(bad)))
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_axe_no_serious_violations(lang, live, browser):
    from axe_playwright_python.sync_playwright import Axe

    page, _ = open_page(browser, live + f"#lang={lang}")
    results = Axe().run(page)
    serious = [(v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
               for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert serious == []
    page.close()


def test_hover_reads_out_the_value(live, browser):
    page, _ = open_page(browser, live + "#lang=en&n=8&g=0.50&res=0")
    page.wait_for_function("() => document.getElementById('ro-plain').dataset.n === '8'")
    api = page.evaluate(f"([p, b]) => ({POST_JSON})(p, b)", ["api/simulate", {"mode": "gradient", "n": 8, "g": 0.5, "residual": "none",
                                                    "norm": "none"}])
    page.locator("#c-plain-layers").scroll_into_view_if_needed()
    box = page.locator("#c-plain-layers .u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5 / 9, box["y"] + box["height"] * 0.9)  # over layer 1's bar
    tip = page.locator("#c-plain-layers .chart-tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert text.startswith("sublayer 1:"), text
    v = api["naive"]["per_layer"][0]
    shown = page.evaluate("(v) => DL.fmt(v, 5)", v)
    assert shown in text
    # the one-line reading beside the figure comes from the same numbers
    reading = page.inner_text("#reading-sim")
    assert "N = 8" in reading and page.evaluate("(v) => DL.pow10(v)", api["naive"]["ratio"]) in reading
    page.close()


def test_block_diagram_animates_the_data_path(live, browser):
    page, _ = open_page(browser, live + "#lang=en&preset=course")
    # the path is built from the anatomy stages the page fetches: wait for them
    page.wait_for_function("() => DL.blockPath().length > 0")
    steps = page.evaluate("() => DL.blockPath()")
    assert [s["kind"] for s in steps[:5]] == ["read", "norm", "transform", "add", "read"]
    page.select_option("#b-placement", "post")
    page.wait_for_function("() => document.getElementById('block-text').textContent.includes('post')")
    steps = page.evaluate("() => DL.blockPath()")
    assert [s["kind"] for s in steps[:4]] == ["read", "transform", "add", "norm"]
    page.select_option("#b-preset", "qwen_next")  # the gated attention scales its output before the add
    page.wait_for_function("() => document.getElementById('block-text').textContent.includes('qwen_next')")
    steps = page.evaluate("() => DL.blockPath()")
    assert [s["kind"] for s in steps[:5]] == ["read", "norm", "transform", "scale", "add"]
    # the animation moves: the highlighted step changes over time
    first = page.evaluate("() => document.querySelector('#block-svg .on') && document.querySelector('#block-svg .on').dataset.step")
    page.wait_for_function(f"() => document.querySelector('#block-svg .on') && document.querySelector('#block-svg .on').dataset.step !== {first!r}")
    page.close()


def test_keyboard_reads_values(live, browser):
    page, _ = open_page(browser, live + "#lang=en&n=4&g=1.00")
    page.wait_for_function("() => document.getElementById('ro-plain').dataset.n === '4'")
    page.focus("#c-improved-layers")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    tip = page.locator("#c-improved-layers .chart-tip")
    tip.wait_for(state="visible")
    assert tip.inner_text().startswith("sublayer 2:")
    page.close()


# ASCII , : ; next to Chinese (a character or full-width punctuation, a space between
# allowed), or ( ) next to a Chinese character: the half-width punctuation of Chinese
# prose. Math keeps its own: "F(x)：" and "√(1 + k)，" are not caught.
HALF_WIDTH_IN_CHINESE = r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef] ?[,.:;]|[,.:;] ?[\u3400-\u9fff\u3000-\u303f\uff00-\uffef]" \
    r"|[\u3400-\u9fff][()]|[()][\u3400-\u9fff]"


def test_zh_title_language_button_and_text_alternatives_are_chinese(live, browser):
    """The zh view's <title> and the language button's name come from the zh table, and no
    text alternative (a chart's aria-label, built from several templates) puts half-width
    punctuation into Chinese; switching back gives the English ones."""
    import re

    from depthlab.locales import table

    page, watch = open_page(browser, live + "#lang=zh")
    zh, en = table("zh"), table("en")
    assert page.title() == zh["doc.title"] != en["doc.title"]
    assert page.get_attribute("#lang", "aria-label") == zh["lang.label"]
    assert page.inner_text("#lang") == zh["lang.switch"]
    labels = page.eval_on_selector_all("[aria-label]", "els => els.map((e) => e.getAttribute('aria-label'))")
    charts = [c["label"] for c in page.evaluate("() => Object.values(DL.charts.all())")]
    assert len(charts) >= 10 and set(charts) <= set(labels)
    bad = [s for s in labels + [page.title()] if re.search(HALF_WIDTH_IN_CHINESE, s)]
    assert bad == [], "\n".join(bad)
    page.click("#lang")
    page.wait_for_function("() => document.documentElement.lang === 'en'")
    assert page.title() == en["doc.title"] and page.get_attribute("#lang", "aria-label") == en["lang.label"]
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()
