"""api.js's section key and static lookup in Chromium: DL.sectionKey writes every request
as depthlab.web.sections.request_key does (numbers as String(number): random doubles
of every magnitude, the grids' values), and a static copy's `section(name, req)` finds
the answer export.py stored, with the section's defaults filled in and shared values
put back."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest
from page_harness import BROWSER_MARKS

from depthlab.web import export, sections
from depthlab.web.sections import js_number, request_key
from tests.test_sections import ECHO, EchoRequest, echo, with_echo  # noqa: F401 - a fixture

pytestmark = BROWSER_MARKS

API_JS = Path(__file__).resolve().parent.parent / "depthlab" / "web" / "static" / "js" / "api.js"


def doubles() -> list[float]:
    """Finite doubles from every exponent (random bits), and decimals like the grids'."""
    rng = random.Random(20261202)
    out = []
    while len(out) < 3000:
        (x,) = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))
        if x == x and abs(x) != float("inf"):
            out.append(x)
    out += [round(rng.uniform(-10, 10), rng.randint(0, 6)) for _ in range(1000)]
    out += [10.0 ** e for e in range(-9, 23)] + [1.5 * 10.0 ** e for e in range(-9, 23)]
    return out


def data_with_echo() -> dict:
    answers, grid = export.section_answers(ECHO)
    stored, shared = export.share(export._round({"_test_echo": answers}))
    listing = [{"name": "_test_echo", "method": "POST", "path": "/api/_test_echo",
                "defaults": sections.defaults(EchoRequest), "grid": grid}]
    return {"meta": {"sections": listing}, "sections": stored, "shared": shared}


@pytest.fixture(scope="module")
def scratch(browser):
    """api.js alone in a page, with a static copy holding the test's section."""
    page = browser.new_page()
    blob = json.dumps(data_with_echo(), ensure_ascii=False).replace("</", "<\\/")
    page.set_content(f'<!doctype html><meta charset="utf-8"><title>keys</title>'
                     f'<script type="application/json" id="depthlab-data">{blob}</script>')
    page.add_script_tag(content=API_JS.read_text(encoding="utf-8"))
    yield page
    page.close()


def test_numbers_are_keyed_as_javascript_writes_them(scratch):
    xs = doubles()
    got = scratch.evaluate("(xs) => xs.map((x) => DL.sectionKey({x}))", xs)
    bad = [(x, g) for x, g in zip(xs, got, strict=True) if g != request_key({"x": x})]
    assert bad == [], bad[:5]
    assert all(g == '{"x":' + js_number(x) + "}" for x, g in zip(xs, got, strict=True))


def test_every_stored_request_is_keyed_alike(scratch):
    """The requests a static copy of the built-in sections holds (small grid; the
    simulator's every switch), and requests with strings, nulls, arrays and booleans."""
    reqs = [r.model_dump(mode="json") for s in sections.SECTIONS if s.static
            for r in s.static("small")]
    reqs += [{"x": [3.0, -4.5, 1e-7], "eps": 1e-5}, {"preset": "course", "placement": None},
             {"label": 'ü "q" \\ \n\t 词元', "b": True, "k": 0}]
    got = scratch.evaluate("(rs) => rs.map((r) => DL.sectionKey(r))", reqs)
    assert got == [request_key(r) for r in reqs]


def test_a_static_copy_answers_a_sections_request(scratch):
    got = scratch.evaluate("""async () => { const s = DL.makeSource();
        const on = s.snap("_test_echo", {k: 2, x: 0.3});
        return [on, await s.section("_test_echo", on), await s.section("_test_echo", {k: 1}),
                await s.section("_test_echo", {k: 2}).then(() => "found", (e) => e.message)]; }""")
    assert got[0] == {"k": 2, "x": 0.25}  # moved onto the stored values
    assert got[1] == export._round(echo(EchoRequest(k=2, x=0.25)))  # shared list put back
    assert got[2] == export._round(echo(EchoRequest(k=1)))  # the default x filled in
    assert "not in this static copy" in got[3]


@pytest.mark.usefixtures("with_echo")
def test_a_section_of_four_files_shows_live_and_static(browser, tmp_path):
    """The test's section (its Python entry and its JS module only) draws its box from its
    answer on the live page and in a static copy opened from disk."""
    from page_harness import Watch, serve

    url, stop = serve(tmp_path / "runs")
    pages = []
    try:
        pages.append((browser.new_page(), url + "#lang=en"))
        copy = export.export_page(tmp_path / "page", runs_dir=tmp_path / "runs", grid="small")
        pages.append((browser.new_page(), copy.as_uri() + "#lang=en"))
        for page, address in pages:
            watch = Watch(page)
            page.goto(address)
            page.wait_for_function("() => window.DL && DL.ready", timeout=60000)  # a loaded machine
            page.wait_for_function("() => document.getElementById('_test_echo') && "
                                   "document.getElementById('_test_echo').textContent !== ''", timeout=30000)
            assert page.inner_text("#_test_echo") == "0.5"  # echo(k=2, x=0.25)["kx"]
            # every box in the registry's order, the test's right after the box it names
            boxes = page.evaluate("() => [...document.querySelectorAll('main > section')].map((s) => s.id)")
            assert boxes == [f["name"] for f in sections.page_order()]
            assert boxes[boxes.index("norms") + 1] == "_test_echo"
            assert watch.errors == [] and page.evaluate("() => DL.errors") == [], address
    finally:
        for page, _ in pages:
            page.close()
        stop()
