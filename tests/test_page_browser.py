"""The lesson page in a real browser (headless Chromium): served live by uvicorn on a
free loopback port, and as a static export opened from file://."""

from __future__ import annotations

import json
from urllib.parse import urlparse

import pytest
from page_harness import ARTIFACTS, BROWSER_MARKS, Watch

pytestmark = BROWSER_MARKS


def _set_range(page, selector: str, value) -> None:
    page.eval_on_selector(selector, "(el, v) => { el.value = v; "
                          "el.dispatchEvent(new Event('input', {bubbles: true})); }", value)


def _wait_readout(page, n: int) -> None:
    page.wait_for_function(f"() => document.getElementById('ro-improved').dataset.n === '{n}' && "
                           f"document.getElementById('ro-plain').dataset.n === '{n}'", timeout=15000)


def test_live_page(live, browser, runs):
    page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="en-US")
    watch = Watch(page)
    page.goto(live + "#lang=en")
    page.wait_for_function("() => window.DL && DL.ready", timeout=15000)
    _wait_readout(page, 32)
    # The first paint asks for each answer once: /api/meta is read once and shared by every
    # module, and no GET is repeated (counted, not timed: how many overlap depends on the CPU).
    page.wait_for_load_state("networkidle")
    api_gets = [u.split("/", 3)[3] for u, m in zip(watch.urls, watch.methods, strict=True)
                if m == "GET" and "/api/" in u]
    assert api_gets.count("api/meta") == 1, api_gets
    assert len(api_gets) == len(set(api_gets)), sorted(api_gets)

    # The N slider: the readout shows exactly what the API answers.
    _set_range(page, "#n", 8)
    _wait_readout(page, 8)
    api = page.evaluate("""() => fetch('api/meta').then(r => r.json()).then(m => fetch('api/simulate', {
        method: 'POST', headers: {'content-type': 'application/json', [m.token_header]: m.write_token},
        body: JSON.stringify({mode: 'gradient', n: 8, g: 1.0, residual: 'plain', norm: 'none'})}))
        .then(r => r.json())""")
    ratio = float(page.get_attribute("#ro-improved", "data-ratio"))
    assert ratio == pytest.approx(api["improved"]["ratio"], rel=1e-12)
    assert float(page.get_attribute("#ro-plain", "data-ratio")) == pytest.approx(api["naive"]["ratio"])
    assert "n=8" in page.url  # the state lives in the URL

    # x0 mixing: its switch turns the green row into the API's answer with x0_mix (the red
    # row stays), the formula shows the mix, and turning it off brings the row back.
    def api_ratio(**switches):
        return page.evaluate("""(sw) => fetch('api/meta').then(r => r.json()).then(m => fetch('api/simulate', {
            method: 'POST', headers: {'content-type': 'application/json', [m.token_header]: m.write_token},
            body: JSON.stringify(Object.assign({mode: 'gradient', n: 8, g: 1.0}, sw))}))
            .then(r => r.json())""", switches)["improved"]["ratio"]

    red = page.get_attribute("#ro-plain", "data-ratio")
    assert not page.is_checked("#t-x0") and not page.is_disabled("#t-x0")
    assert "λᵢ·x + μᵢ·x₀" in page.get_attribute("#t-x0-label >> xpath=..", "title")  # the hint
    page.click("#t-x0")
    mixed = api_ratio(residual="plain", norm="none", x0_mix=True)
    assert mixed != pytest.approx(ratio, rel=1e-3)
    page.wait_for_function(f"() => +document.getElementById('ro-improved').dataset.ratio === {mixed!r}")
    assert "x0=1" in page.url and page.get_attribute("#ro-plain", "data-ratio") == red
    assert page.inner_text("#improved-formula") == "x ← λᵢ·x + μᵢ·x₀; x ← x + F(x)"
    page.click("#t-x0")
    page.wait_for_function(f"() => +document.getElementById('ro-improved').dataset.ratio === {ratio!r}")
    assert "x0=0" in page.url and page.inner_text("#improved-formula") == "x ← x + F(x)"

    # The switches are the model's: one radio per residual of the registry (from /api/meta),
    # and the sliders' bounds come from meta too.
    meta = page.evaluate("() => fetch('api/meta').then(r => r.json())")["simulator"]
    radios = page.eval_on_selector_all("[name=sim-residual]", "els => els.map(e => e.value)")
    assert radios == meta["residuals"]
    assert page.get_attribute("#n", "max") == str(meta["depth"][1])
    assert float(page.get_attribute("#g", "step")) == meta["gain_step"]

    # Switching the residual to none changes the green row (and not the red one).
    plain_before = page.get_attribute("#ro-plain", "data-ratio")
    page.click("#t-res-none")
    page.wait_for_function("() => document.getElementById('improved-formula').textContent === 'x ← F(x)'")
    page.wait_for_function("() => document.getElementById('ro-improved').dataset.ratio === "
                           "document.getElementById('ro-plain').dataset.ratio")
    assert float(page.get_attribute("#ro-improved", "data-ratio")) != pytest.approx(ratio)
    assert page.get_attribute("#ro-plain", "data-ratio") == plain_before
    assert "residual=none" in page.url

    # ReZero: every write is zero at init, so the gradient reaches the bottom untouched.
    page.click("#t-res-rezero")
    page.wait_for_function("() => document.getElementById('ro-improved').dataset.ratio === '1'")
    page.click("#t-norm")
    page.wait_for_function("() => location.hash.includes('norm=rmsnorm')")
    assert page.inner_text("#improved-formula") == "x ← x + a·F(RMSNorm(x)), a = 0"

    # nGPT keeps the stream on the sphere itself: choosing it turns the norm switch off and
    # disables it, and a link asking for both opens it without the norm.
    page.click("#t-res-ngpt")
    page.wait_for_function("() => location.hash.includes('residual=ngpt') && location.hash.includes('norm=none')")
    assert not page.is_checked("#t-norm") and page.is_disabled("#t-norm")
    assert page.inner_text("#improved-formula") == "x ← N(x + α·(N(F(x)) − x)), N(v) = v/‖v‖"
    # x0 mixing does not apply to nGPT: its switch is off and disabled, and says why
    assert not page.is_checked("#t-x0") and page.is_disabled("#t-x0")
    assert "not with this residual" in page.get_attribute("#t-x0-label >> xpath=..", "title")
    page.wait_for_function("() => document.getElementById('ro-improved').dataset.ratio !== undefined")
    page.goto("about:blank")
    page.goto(live + "#lang=en&n=8&residual=ngpt&norm=rmsnorm&x0=1")
    page.wait_for_function("() => location.hash.includes('norm=none') && location.hash.includes('x0=0')",
                           timeout=15000)
    _wait_readout(page, 8)
    assert page.is_checked("#t-res-ngpt") and page.is_disabled("#t-norm") and page.is_disabled("#t-x0")
    page.click("#t-res-rezero")
    page.wait_for_function("() => !document.getElementById('t-norm').disabled")

    # An old link (res/pre/wb) opens the same view in the model's vocabulary.
    page.goto("about:blank")
    page.goto(live + "#lang=en&n=8&g=1.00&res=1&pre=1&wb=1")
    page.wait_for_function("() => location.hash.includes('residual=scaled') && "
                           "location.hash.includes('norm=rmsnorm')", timeout=15000)
    page.wait_for_function("() => document.getElementById('improved-formula').textContent === "
                           "'x ← x + F(RMSNorm(x)) / √N'")
    assert page.is_checked("#t-res-scaled") and page.is_checked("#t-norm")
    page.goto(live + "#lang=en")
    page.wait_for_function("() => window.DL && DL.ready", timeout=15000)

    # Project charts: the micro experiment's charts are drawn, with its export date.
    export = json.loads((runs / "residual" / "export.json").read_text())
    page.wait_for_selector("#exp-residual canvas", timeout=15000)
    assert page.locator("#exp-residual .pchart").count() == len(export["charts"])
    assert export["exported_at"] in page.inner_text("#exp-residual")

    # Language switch changes the text, and back.
    title_en = page.inner_text("h1")
    page.click("#lang")
    page.wait_for_function(f"() => document.querySelector('h1').textContent !== {json.dumps(title_en)}")
    assert "残差" in page.inner_text("h1") and "lang=zh" in page.url

    page.wait_for_timeout(300)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "page.png"), full_page=True)
    assert watch.errors == []
    assert page.evaluate("() => DL.errors") == []
    hosts = {urlparse(u).hostname for u in watch.urls}
    assert hosts <= {"127.0.0.1"}, hosts
    page.close()


def test_dragging_never_queues(live, browser):
    page = browser.new_page()
    page.goto(live + "#lang=en&mode=collapse&n=32")
    page.wait_for_function("() => window.DL && DL.ready", timeout=15000)
    _wait_readout(page, 32)
    before = page.evaluate("() => DL.stats.requests")
    # 40 input events in one burst: at most one request in flight, only the newest sent.
    page.evaluate("""() => { const el = document.getElementById('n');
        for (let v = 64; v > 24; v--) { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); } }""")
    _wait_readout(page, 25)
    sent = page.evaluate("() => DL.stats.requests") - before
    assert sent <= 3, sent  # the first of the burst, then the newest state
    page.close()


def test_static_export_from_file(tmp_path, browser, runs):
    from depthlab.web.export import export_page
    from depthlab.web.schemas import SimulateRequest
    from depthlab.web.sections import request_key

    path = export_page(tmp_path / "page", runs_dir=runs, grid="small")
    html = path.read_text()
    assert 'src="' not in html and "href=\"static" not in html
    page = browser.new_page()
    watch = Watch(page)
    page.goto(path.as_uri() + "#lang=en&n=32&g=1.00")
    page.wait_for_function("() => window.DL && DL.ready", timeout=15000)
    _wait_readout(page, 32)
    _set_range(page, "#n", 9)  # not on the grid: snaps to 8
    _wait_readout(page, 8)
    data = page.evaluate("() => JSON.parse(document.getElementById('depthlab-data').textContent)")
    from depthlab.locales import LANGS, table  # the copy carries every language's whole table
    assert data["locales"] == {lang: table(lang) for lang in LANGS} and data["meta"]["placements"]
    def improved(**switches):  # the stored answer, by the key the page computes
        key = page.evaluate("([req, d]) => DL.sectionKey(req, d)", [
            {"mode": "gradient", "n": 8, "g": 1.0, **switches}, data["meta"]["sections"][0]["defaults"]])
        assert key == request_key(SimulateRequest(mode="gradient", n=8, g=1.0, **switches))
        row = data["sections"]["simulate"][key]["improved"]
        return (data["shared"][row["$shared"]] if "$shared" in row else row)["ratio"]

    assert data["meta"]["sections"][0]["name"] == "simulate"
    want = improved(residual="plain", norm="none")
    assert float(page.get_attribute("#ro-improved", "data-ratio")) == pytest.approx(want)
    assert data["meta"]["simulator"]["residuals"] == [
        e for e in page.eval_on_selector_all("[name=sim-residual]", "els => els.map(e => e.value)")]
    # x0 mixing, stored for the plain residual: the switch changes the green row here too
    page.click("#t-x0")
    want = improved(residual="plain", norm="none", x0_mix=True)
    assert want != pytest.approx(improved(residual="plain", norm="none"), rel=1e-3)
    page.wait_for_function(f"() => +document.getElementById('ro-improved').dataset.ratio === {want}")
    assert data["meta"]["simulator"]["x0_static"] == ["plain"]
    page.click("#t-res-scaled")  # not stored for scaled: the switch goes off and says so
    page.wait_for_function("() => location.hash.includes('x0=0')")
    assert page.is_disabled("#t-x0") and page.inner_text("#t-x0-why").strip() == "(not in this static copy)"
    assert "Not in this static copy" in page.get_attribute("#t-x0-label >> xpath=..", "title")
    page.click("#t-norm")
    want = improved(residual="scaled", norm="rmsnorm")
    page.wait_for_function(f"() => +document.getElementById('ro-improved').dataset.ratio === {want}")
    page.click("#mode-collapse")
    page.wait_for_function("() => document.getElementById('ro-plain').dataset.distance !== undefined")
    # the other mixers are stored for the plain residual only (meta's mixer_static)
    assert data["meta"]["simulator"]["mixer_static"] == ["plain"]
    assert page.is_disabled("#t-mixer")
    assert "Not in this static copy" in page.get_attribute("#t-mixer >> xpath=..", "title")
    page.click("#t-res-plain")
    page.wait_for_function("() => !document.getElementById('t-mixer').disabled")
    page.select_option("#t-mixer", "gated_deltanet")
    req = {"mode": "collapse", "n": 8, "g": 1.0, "residual": "plain", "norm": "rmsnorm", "mixer": "gated_deltanet"}
    row = data["sections"]["simulate"][request_key(SimulateRequest(**req))]["improved"]
    want = (data["shared"][row["$shared"]] if "$shared" in row else row)["rel_distance"][8]
    page.wait_for_function(f"() => +document.getElementById('ro-improved').dataset.distance === {want}")
    page.fill("#vec", "2, 4, 6, 8")  # the norms calculator runs without a server
    page.wait_for_function("() => document.getElementById('norm-rms') && "
                           "document.getElementById('norm-rms').textContent === '5.477'")
    # the formula's exact arithmetic is embedded on a grid: N 60, a -1.9 move to 64, -2
    page.evaluate("() => DL.state.set({pn: 60, pa: -1.9})")
    page.wait_for_function("() => { const el = document.getElementById('paths-expansion'); "
                           "return el.dataset.n === '64' && el.dataset.a === '-2'; }")
    assert page.inner_text("#paths-total") == "1"  # (1 + a)^N, exactly
    assert page.inner_text("#paths-count") == "18,446,744,073,709,551,616"
    assert "N ∈ {1, 2, 3, 4, 5, 8, 10, 16, 32, 64}" in page.inner_text("#paths-static")
    page.wait_for_selector("#exp-residual canvas")
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    assert all(u.startswith("file://") for u in watch.urls), watch.urls
    page.close()


def test_a_chart_error_is_shown(live, browser):
    """A chart that cannot be drawn says so in its box and in the page's error banner."""
    page = browser.new_page()
    page.goto(live + "#lang=en")
    page.wait_for_function("() => window.DL && DL.ready", timeout=15000)
    assert not page.is_visible("#page-errors")
    page.evaluate("""() => { const el = document.createElement('div'); el.id = 't-broken';
        document.querySelector('main').prepend(el);
        DL.charts.make(el, {xLabel: () => 'x', yLabel: () => { throw new Error('no label for this axis'); },
                            series: [{label: 'y', color: '#000000'}]}); }""")
    assert "no label for this axis" in page.inner_text("#t-broken .chart-error")
    assert page.is_visible("#page-errors") and "no label for this axis" in page.inner_text("#page-errors")
    assert page.evaluate("() => DL.errors") == ["no label for this axis"]
    page.close()


def test_every_linear_chart_starts_at_zero_or_says_where_it_starts(live, browser):
    """A linear y axis that does not reach zero (the project's losses) carries a break mark
    and says where it starts beside its label, in both languages; the simulator's stream
    RMS, a size, starts at zero."""
    from depthlab.locales import table

    page = browser.new_page(viewport={"width": 1400, "height": 900}, locale="en-US")
    watch = Watch(page)
    for lang in ("en", "zh"):
        page.goto(live + f"#lang={lang}")
        page.wait_for_function("() => window.DL && DL.ready", timeout=20000)
        page.wait_for_selector("#exp-residual canvas", timeout=20000)
        _wait_readout(page, 32)
        note = table(lang)["chart.broken.low"].split("{v}")[0]
        # the second language comes by a change of the address's hash, in the same document:
        # wait for the charts drawn from server answers (the real model's) to be relabelled
        page.wait_for_function("""([note, lang]) => DL.lang() === lang &&
            Object.values(DL.charts.all()).every((c) => c.log || !c.yScale || c.yScale[0] <= 0 ||
                                                       c.yTitle.includes(note))""", arg=[note, lang],
                               timeout=20000)
        charts = page.evaluate("() => DL.charts.all()")
        linear = {k: c for k, c in charts.items() if not c["log"] and c["yScale"]}
        above = {k for k, c in linear.items() if c["yScale"][0] > 0}
        assert above, "no linear chart starts above zero: nothing is checked"
        for k, c in linear.items():
            if k in above:
                assert c["broken"] == c["yScale"][0] and note in c["yTitle"], (k, c["yTitle"])
            else:
                assert c["broken"] is None and note not in c["yTitle"], k
        for k in ("c-plain-rms", "c-improved-rms"):
            assert linear[k]["yScale"][0] == 0 and max(linear[k]["ys"][0]) > 1, k
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()


def test_the_mixer_switch_changes_the_green_row_in_collapse_mode_only(live, browser):
    """The simulator's token mixer: each of meta's mixers is an option; choosing one makes
    the green row the API's answer for it and lands in the URL; gradient mode and a residual
    the model's DeltaNet layer refuses turn the switch off and say why."""
    from depthlab.probes import StackRequest, token_collapse
    from depthlab.probes.simulator_bounds import page_bounds

    bounds = page_bounds()
    page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="en-US")
    watch = Watch(page)
    page.goto(live + "#lang=en&mode=collapse&n=8&g=1.00&residual=plain&norm=none")
    page.wait_for_function("() => window.DL && DL.ready", timeout=15000)
    _wait_readout(page, 8)
    assert page.eval_on_selector_all("#t-mixer option", "os => os.map(o => o.value)") == bounds["mixers"]
    for mixer in bounds["mixers"][::-1]:
        page.select_option("#t-mixer", mixer)
        want = token_collapse(StackRequest(depth=8, residual="plain", mixer=mixer)).rel_distance[8]
        page.wait_for_function(f"() => +document.getElementById('ro-improved').dataset.distance === {want!r}")
        assert f"mixer={mixer}" in page.evaluate("() => location.hash")
        label = page.eval_on_selector("#t-mixer", "s => s.selectedOptions[0].textContent")
        assert f"After N = 8 sublayers ({label})" in page.inner_text("#reading-sim")
    page.select_option("#t-mixer", "gated_deltanet")
    page.click("#mode-gradient")
    page.wait_for_function("() => document.getElementById('t-mixer').disabled")
    assert "no token mixer" in page.get_attribute("#t-mixer >> xpath=..", "title")
    page.click("#mode-collapse")
    page.wait_for_function("() => !document.getElementById('t-mixer').disabled")
    for residual in bounds["mixer_refused"]:
        page.click(f"#t-res-{residual}")
        page.wait_for_function("() => document.getElementById('t-mixer').disabled")
        assert page.eval_on_selector("#t-mixer", "s => s.value") == "attention"
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()
