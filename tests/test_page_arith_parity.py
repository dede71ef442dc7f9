"""The page's arithmetic in Chromium. The exact figures (path counts, C(N, k), the terms
and their sum (1 + a)^N) are the server's: the page shows the server's text, digit for
digit, live and from a static copy's embedded grid, and computes none of them. The norms
calculator of a static copy (a typed vector cannot be precomputed) is float64 arithmetic
in api.js, kept equal to depthlab.probes.exact.compare_norms here."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest
from page_harness import BROWSER_MARKS

from depthlab.web import compute, export, sections
from depthlab.web.schemas import NormsRequest, PathsRequest

pytestmark = BROWSER_MARKS

JS = Path(__file__).resolve().parent.parent / "depthlab" / "web" / "static" / "js"
API_JS = JS / "api.js"
SUP = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")
# (N, a) on the page: the known answers, cancellation, a tiny and a long value
STATES = [(64, "-2", "1"), (64, "-1", "0"), (10, "1", "1,024"), (2, "0.5", "2.25"),
          (64, "-0.1", None), (33, "-1.7", None), (5, "0.3", None), (64, "10", None)]


def from_display(s: str) -> str:
    """The server's text back from what the page shows: "≈ 1.2 × 10⁻⁴⁰" is "~1.2e-40"."""
    s = s.replace("≈ ", "~").replace("−", "-")
    m = re.fullmatch(r"(~?-?)(?:([0-9.,]+) × )?10([⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)", s)
    if m:
        return f"{m.group(1)}{m.group(2) or '1'}e{m.group(3).translate(SUP)}"
    return s


def vectors() -> list[list[float]]:
    rng = random.Random(20261201)
    return [[3.0, 4.0], [7.0], [2.0, 2.0, 2.0], [0.0, 0.0], [-1e6, 1e6, 3.5], [0.003, 0.004],
            [200.0, 400.0, 600.0, 800.0], [rng.gauss(0, 1) for _ in range(64)],
            [rng.uniform(-1e3, 1e3) for _ in range(17)]]


def same(js, py, where: str = "") -> list[str]:
    """Where two JSON values differ: floats to 1e-12 relative (1e-12 absolute for the
    changes under scaling, differences of outputs near 1)."""
    if isinstance(py, dict):
        if set(js) != set(py):
            return [f"{where}: keys {sorted(set(js) ^ set(py))}"]
        return [d for k in py for d in same(js[k], py[k], f"{where}.{k}")]
    if isinstance(py, (list, tuple)):
        if len(js) != len(py):
            return [f"{where}: length {len(js)} != {len(py)}"]
        return [d for i, (a, b) in enumerate(zip(js, py, strict=True)) for d in same(a, b, f"{where}[{i}]")]
    if isinstance(py, float) or isinstance(js, float):
        ok = js is not None and math.isclose(js, py, rel_tol=1e-12,
                                             abs_tol=1e-12 if where.endswith("_change") else 1e-300)
        return [] if ok else [f"{where}: {js!r} != {py!r}"]
    return [] if js == py else [f"{where}: {js!r} != {py!r}"]


@pytest.fixture(scope="module")
def scratch(browser):
    """api.js alone in a page, with a static copy's embedded paths grid."""
    answers, grid = export.section_answers(sections.section("paths"))
    stored, shared = export.share(export._round({"paths": answers}))
    listing = [dict(e, grid=grid) for e in sections.listing() if e["name"] == "paths"]
    data = {"meta": {"sections": listing}, "sections": stored, "shared": shared}
    page = browser.new_page()
    blob = json.dumps(data).replace("</", "<\\/")
    page.set_content(f'<!doctype html><title>arith</title><script type="application/json" '
                     f'id="depthlab-data">{blob}</script>')
    page.add_script_tag(content=API_JS.read_text(encoding="utf-8"))
    page.add_script_tag(content=(JS / "charts.js").read_text(encoding="utf-8"))  # DL.exact, DL.fmtApart
    yield page
    page.close()


@pytest.fixture(scope="module")
def empty_live(tmp_path_factory):
    from page_harness import serve

    url, stop = serve(tmp_path_factory.mktemp("empty-runs"))
    yield url
    stop()


def test_the_page_computes_no_exact_figure(scratch):
    """The only arithmetic in api.js is the norms calculator's (its BigInts are rationals
    rounded to doubles, never a figure's text)."""
    assert scratch.evaluate("() => Object.keys(DL.arith)") == ["norms"]
    assert "Math.pow" not in API_JS.read_text()


def test_a_static_copy_answers_with_the_servers_texts(scratch):
    """Every (N, a) of the grid, looked up as the page looks it up (a typed value moves to
    the nearest): the server's exact texts, unrounded by the export."""
    texts = lambda j: {k: v for k, v in j.items() if k.endswith("_text")} | {
        "groups": [{k: v for k, v in g.items() if k.endswith("_text")} for g in j["groups"]]}
    for n in export.PATHS_GRID["n"]:
        for a in export.PATHS_GRID["a"]:
            nudged = [n + 0.4 if n > 1 else n, float(a) + 0.01]
            got = scratch.evaluate("""async ([n, a]) => { const s = DL.makeSource();
                const r = s.snap("paths", {n, a}); return [r.n, r.a, await s.section("paths", r)]; }""", nudged)
            assert got[:2] == [n, float(a)]
            assert texts(got[2]) == texts(compute.paths(PathsRequest(n=n, a=float(a)))), (n, a)


def test_the_live_page_shows_the_servers_exact_text(empty_live, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900}, locale="en-US")
    page.goto(empty_live + "#lang=en")
    page.wait_for_function("() => window.DL && DL.ready", timeout=60000)  # a loaded machine
    for n, a, known in STATES:
        page.evaluate("([n, a]) => DL.state.set({pn: n, pa: +a})", [n, a])
        want = compute.paths(PathsRequest(n=n, a=float(a)))
        page.wait_for_function("([n, a]) => { const el = document.getElementById('paths-expansion'); "
                               "return el.dataset.n === n && el.dataset.a === a; }",
                               arg=[str(n), want["scale_text"]], timeout=60000)  # the server warms up first
        shown = {k: page.inner_text(f"#{k}") for k in ("paths-count", "paths-total", "paths-plain", "paths-jac",
                                                         "paths-jac-plain")}
        assert from_display(shown["paths-count"]) == want["n_paths_text"] == f"{2**n:,}"
        assert from_display(shown["paths-total"]) == want["residual_output_text"]
        assert from_display(shown["paths-jac"]) == want["jacobian_text"]
        assert from_display(shown["paths-plain"]) == want["plain_output_text"]
        assert from_display(shown["paths-jac-plain"]) == want["plain_jacobian_text"]
        if known:
            assert shown["paths-total"] == known
        rows = page.eval_on_selector_all("#paths-expansion tbody tr", "trs => trs.map(tr => "
                                         "[...tr.children].map(td => td.textContent))")
        by_k = {int(r[0]): r for r in rows if r[0] != "…"}
        for g in want["groups"]:
            if g["layers_passed"] in by_k:
                _, count, each, total = by_k[g["layers_passed"]]
                assert [from_display(c) for c in (count, each, total)] == [
                    g["n_paths_text"], g["value_each_text"], g["total_text"]]
    page.close()


def test_norms_equal_on_the_vectors(scratch):
    xs = vectors()
    for eps in (1e-5, 1e-6):
        got = scratch.evaluate("([xs, eps]) => xs.map((x) => DL.arith.norms(x, eps))", [xs, eps])
        bad = [d for x, js in zip(xs, got, strict=True)
               for d in same(js, compute.norms(NormsRequest(x=tuple(x), eps=eps)), f"x={x[:3]}..")]
        assert bad == [], bad[:10]


# where exact statistics and a rounded float sum part: equal entries (their float mean
# is not the entry), two neighbouring doubles, squares below float64, subnormal inputs
EDGES = [([0.1, 0.1, 0.1], 1e-300), ([1.0, 1.0000000000000002], 1e-300),
         ([999999.0, 999999.0000000001], 1e-300), ([1e-160, 1e-160], 1e-5), ([1e-170], 1e-5),
         ([5e-324, -5e-324], 1e-300), ([-0.0, 0.0], 1e-5), ([1e-310, 3e-310], 5e-324),
         ([0.7] * 64, 1.0)]


def test_norms_are_the_servers_bit_for_bit(scratch):
    """The same exact statistics and the same roundings: equal doubles, not close ones, on
    random vectors at eps across float64's range and on the edges above."""
    rng = random.Random(20261202)
    cases = EDGES + [([rng.uniform(-1, 1) * 10 ** rng.uniform(-300, 6) for _ in range(rng.randint(1, 64))],
                      10 ** rng.uniform(-300, 0)) for _ in range(200)]
    got = scratch.evaluate("(cases) => cases.map(([x, eps]) => DL.arith.norms(x, eps))", cases)
    for (x, eps), js in zip(cases, got, strict=True):
        py = json.loads(json.dumps(compute.norms(NormsRequest(x=tuple(x), eps=eps))))
        assert js == py, (x[:3], eps)
    equal = got[0]  # equal entries centre to 0, and LayerNorm gives 0, whatever eps
    assert equal["centred"] == [0.0] * 3 and equal["layernorm"] == [0.0] * 3
    assert got[1]["layernorm"] == [-1.0, 1.0] and got[4]["rms"] == 1e-170


def test_the_comparisons_catch_a_difference():
    assert same({"a": [1.0, 2.0]}, {"a": [1.0, 2.0 + 1e-9]}) == [".a[1]: 2.0 != 2.000000001"]
    assert same({"a": 1}, {"b": 1}) == [": keys ['a', 'b']"]
    assert from_display("≈ −1.25 × 10⁻⁴⁰") == "~-1.25e-40" and from_display("10⁻⁶⁴") == "1e-64"
    assert from_display("1,024") == "1,024"


def test_the_notation_changes_and_the_digits_stay(scratch):
    """DL.exact rewrites the server's text for people and nothing else."""
    cases = {"1,024": "1,024", "-2": "−2", "~1.17901845777e-3": "≈ 1.17901845777 × 10⁻³",
             "1e-64": "10⁻⁶⁴", "~-3.5e66": "≈ −3.5 × 10⁶⁶", "~19,605,347.6431": "≈ 19,605,347.6431"}
    got = scratch.evaluate("(xs) => xs.map((x) => DL.exact(x))", list(cases))
    assert got == list(cases.values())
    assert [from_display(g) for g in got] == list(cases)


def test_values_that_round_alike_are_written_apart(scratch):
    """The two stacks' cosines: near 1 as 1 − x, and different values never read the same."""
    got = scratch.evaluate("(pairs) => pairs.map((p) => DL.fmtApart(p))",
                           [[0.99999997, 1.0], [0.9999, 0.99995], [0.5121, 0.5124], [0.914, 1.0], [1.0, 1.0]])
    assert got[0] == ["1 − 3.0 × 10⁻⁸", "1"]
    assert got[1] == ["1 − 1.0 × 10⁻⁴", "1 − 5.0 × 10⁻⁵"]
    assert got[2] == ["0.5121", "0.5124"]
    assert got[3] == ["0.914", "1"] and got[4] == ["1", "1"]
