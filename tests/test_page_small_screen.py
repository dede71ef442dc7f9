"""A phone-sized screen (390 px) and the simulator's head-to-tail picture.

At 390 px the header stays one line and the simulator's sliders stay in view while any of
its charts is on screen (they stick under the header within their panel), in both
languages. The picture of one token's first writes draws the server's trail, live and in
the static copy: red as states from the origin, green as writes head to tail, and hovering
an arrow reads out its length."""

from __future__ import annotations

import pytest
from page_harness import BROWSER_MARKS, POST_JSON, Watch

pytestmark = BROWSER_MARKS


def open_page(browser, url: str, width: int):
    page = browser.new_page(viewport={"width": width, "height": 844}, locale="en-US")
    watch = Watch(page)
    page.goto(url)
    page.wait_for_function("() => window.DL && DL.ready", timeout=20000)
    page.wait_for_function("() => document.getElementById('trail-improved').dataset.rule", timeout=20000)
    return page, watch


HEADER = """() => {
  const top = document.querySelector('header.top');
  const kids = [...top.querySelector('.top-row').children].filter((e) => e.offsetParent !== null);
  const crumb = top.querySelector('.crumb');
  return {height: top.getBoundingClientRect().height, rects: crumb.getClientRects().length,
          line: parseFloat(getComputedStyle(crumb).lineHeight) || 1.55 * parseFloat(getComputedStyle(crumb).fontSize),
          crumbHeight: crumb.getBoundingClientRect().height,
          tops: kids.map((e) => Math.round(e.getBoundingClientRect().top + e.getBoundingClientRect().height / 2))};
}"""

# Where the sliders are once `id` is scrolled to the middle of the screen: their boxes,
# the header's bottom, the viewport's height, and whether each slider is the element
# under its own centre (not covered by anything).
IN_VIEW = """async (id) => {
  document.getElementById(id).scrollIntoView({block: 'center'});
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const box = (e) => { const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
  const chart = box(document.getElementById(id));
  const out = {chart, header: document.querySelector('header.top').getBoundingClientRect().bottom,
               height: innerHeight, width: innerWidth, sliders: {}};
  for (const s of ['n', 'g']) {
    const el = document.getElementById(s);
    const b = box(el);
    const hit = document.elementFromPoint((b.left + b.right) / 2, (b.top + b.bottom) / 2);
    out.sliders[s] = Object.assign(b, {clear: hit === el});
  }
  return out;
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_header_is_one_line_at_390(lang, live_empty, browser):
    page, watch = open_page(browser, live_empty + f"#lang={lang}", 390)
    h = page.evaluate(HEADER)
    assert h["rects"] == 1 and h["crumbHeight"] < 1.5 * h["line"], h  # the crumb is one line
    assert len(set(h["tops"])) == 1, h  # the crumb and the language button side by side
    assert h["height"] < 2 * h["line"] + 12, h  # one line and its padding
    assert watch.errors == []
    page.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_sliders_stay_in_view_while_a_chart_is_at_390(lang, live_empty, browser):
    page, watch = open_page(browser, live_empty + f"#lang={lang}&n=16&g=1.00&residual=plain", 390)
    for chart in ("c-plain-layers", "c-improved-rms", "trail-improved", "c-bottom"):
        v = page.evaluate(IN_VIEW, chart)
        assert v["chart"]["bottom"] > 0 and v["chart"]["top"] < v["height"], (chart, v)
        for name, s in v["sliders"].items():
            assert v["header"] - 1 <= s["top"] and s["bottom"] <= v["height"], (chart, name, v)
            assert 0 <= s["left"] and s["right"] <= v["width"], (chart, name, v)
            assert s["clear"], (chart, name, "covered", v)
    # and they work from there: a key on g moves it, the picture redraws for the new g
    page.focus("#g")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.getElementById('g-out').textContent === '1.05'")
    page.wait_for_function("() => DL.state.get().g === 1.05 && document.getElementById('sim-status').textContent === ''")
    assert page.evaluate(IN_VIEW, "c-bottom")["sliders"]["g"]["clear"]
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()


# The picture as drawn: per panel its rule, its segments' classes, and each one's text.
DRAWN = """() => Object.fromEntries(['plain', 'improved'].map((row) => {
  const box = document.getElementById('trail-' + row);
  const segs = [...box.querySelectorAll('g.seg')];
  return [row, {rule: box.dataset.rule, cls: segs.map((g) => g.getAttribute('class').replace('seg ', '')),
                texts: segs.map((g) => g.querySelector('title').textContent)}];
}))"""


@pytest.mark.parametrize("where", ["live_empty", "exported_small"])
def test_the_picture_draws_the_servers_trail(where, request, browser):
    base = request.getfixturevalue(where)
    n, g = (8, 1.5) if where == "exported_small" else (12, 1.3)  # the small grid holds N = 8, g = 1.5
    page, watch = open_page(browser, base + f"#lang=en&n={n}&g={g:.2f}&residual=plain&norm=none", 1400)
    page.wait_for_function(f"() => DL.state.get().n === {n} && document.getElementById('sim-status').textContent === ''")
    drawn = page.evaluate(DRAWN)
    if where == "live_empty":
        r = page.evaluate(f"([p, b]) => ({POST_JSON})(p, b)",
                          ["api/simulate", {"mode": "gradient", "n": n, "g": g, "residual": "plain", "norm": "none"}])
        red, green = r["naive"]["trail"], r["improved"]["trail"]
        fmt = lambda v: page.evaluate("(v) => DL.fmt(v)", v)
        assert fmt(red["len"][3]) in drawn["plain"]["texts"][3]  # x3 = F(x2): its length
        assert fmt(green["wlen"][2]) in drawn["improved"]["texts"][3]  # write 3: its length
        assert fmt(green["len"][6]) in drawn["improved"]["texts"][-1]  # the sum x6
    assert drawn["plain"] == {**drawn["plain"], "rule": "replace"}
    assert drawn["plain"]["cls"] == ["x0"] + ["state"] * 6
    assert drawn["improved"]["rule"] == "add"
    assert drawn["improved"]["cls"] == ["x0"] + ["write"] * 6 + ["sum"]
    # hovering an arrow reads out its length under the panel
    seg = page.locator("#trail-improved g.seg").nth(2)
    seg.scroll_into_view_if_needed()
    seg.focus()
    assert page.locator("#trail-ro-improved").inner_text() == drawn["improved"]["texts"][2]
    assert page.locator("#reading-trail").inner_text().startswith("Red, x ← F(x): each write replaces")
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()
