"""The static copy's exact arithmetic (DL.arith in static/js/api.js) against the server's
(depthlab.web.compute, on depthlab.probes.exact): the same JSON on the same grid of N, a
and vectors, the JavaScript run in Chromium. A typed vector or any real a cannot be
precomputed, so the static page computes them itself, and this test keeps the two equal."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from page_harness import BROWSER_MARKS

from depthlab.web import compute
from depthlab.web.schemas import NormsRequest, PathsRequest

pytestmark = BROWSER_MARKS

API_JS = Path(__file__).resolve().parent.parent / "depthlab" / "web" / "static" / "js" / "api.js"
DEPTHS = (1, 2, 3, 4, 5, 7, 16, 33, 64)  # both ends of the bound, and the listed-paths edge (4, 5)
SCALES = (-10.0, -2.5, -1.0, -0.5, 0.0, 0.3, 1.0, 1.7, 10.0)


def vectors() -> list[list[float]]:
    rng = random.Random(20261201)
    return [[3.0, 4.0], [7.0], [2.0, 2.0, 2.0], [0.0, 0.0], [-1e6, 1e6, 3.5],
            [200.0, 400.0, 600.0, 800.0], [rng.gauss(0, 1) for _ in range(64)],
            [rng.uniform(-1e3, 1e3) for _ in range(17)]]


def same(js, py, where: str = "") -> list[str]:
    """Where two JSON values differ: floats to 1e-12 relative; a count exactly as the page
    reads it from the API's JSON (a float64: C(64, 32) has more digits than a double)."""
    if isinstance(py, dict):
        if set(js) != set(py):
            return [f"{where}: keys {sorted(set(js) ^ set(py))}"]
        return [d for k in py for d in same(js[k], py[k], f"{where}.{k}")]
    if isinstance(py, (list, tuple)):
        if len(js) != len(py):
            return [f"{where}: length {len(js)} != {len(py)}"]
        return [d for i, (a, b) in enumerate(zip(js, py, strict=True)) for d in same(a, b, f"{where}[{i}]")]
    if isinstance(py, float) or isinstance(js, float):
        ok = math.isclose(js, py, rel_tol=1e-12, abs_tol=1e-300)
        return [] if ok else [f"{where}: {js!r} != {py!r}"]
    if isinstance(py, int) and not isinstance(py, bool):
        return [] if float(js) == float(py) else [f"{where}: {js!r} != {py!r}"]
    return [] if js == py else [f"{where}: {js!r} != {py!r}"]


@pytest.fixture(scope="module")
def page(browser):
    page = browser.new_page()
    page.set_content("<!doctype html><title>arith</title>")
    page.add_script_tag(content=API_JS.read_text(encoding="utf-8"))
    yield page
    page.close()


def test_paths_equal_on_the_grid(page):
    grid = [(n, a) for n in DEPTHS for a in SCALES]
    got = page.evaluate("(grid) => grid.map(([n, a]) => DL.arith.paths(n, a))", grid)
    bad = [d for (n, a), js in zip(grid, got, strict=True)
           for d in same(js, compute.paths(PathsRequest(n=n, a=a)), f"N={n}, a={a}")]
    assert bad == [], bad[:10]


def test_norms_equal_on_the_grid(page):
    xs = vectors()
    for eps in (1e-5, 1e-6):
        got = page.evaluate("([xs, eps]) => xs.map((x) => DL.arith.norms(x, eps))", [xs, eps])
        bad = [d for x, js in zip(xs, got, strict=True)
               for d in same(js, compute.norms(NormsRequest(x=tuple(x), eps=eps)), f"x={x[:3]}..")]
        assert bad == [], bad[:10]


def test_the_comparison_catches_a_difference():
    assert same({"a": [1.0, 2.0]}, {"a": [1.0, 2.0 + 1e-9]}) == [".a[1]: 2.0 != 2.000000001"]
    assert same({"a": 1}, {"b": 1}) == [": keys ['a', 'b']"]
    assert same([2**60 + 1], [2**60]) == [] and same([2**53 + 2], [2**53]) != []
