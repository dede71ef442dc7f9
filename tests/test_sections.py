"""The page-section registry (depthlab/web/sections.py): a section that exists only in this
test (its request model, its compute, its registry entry; its JS module in a copy of the
page's files) gets a route, an OpenAPI entry, an /api/meta listing, a static-export entry
and its script in the page; the registry's built-in
sections are the routes the page uses; the canonical request key writes numbers as
JavaScript does (tests/test_page_sections.py runs api.js's key on the same requests)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from pydantic import Field

from depthlab.web import compute, export, sections
from depthlab.web.app import create_app
from depthlab.web.schemas import Request
from depthlab.web.sections import Section, js_number, request_key


class EchoRequest(Request):
    k: int = Field(..., ge=1, le=9, description="how many")
    x: float = Field(0.5, ge=-1.0, le=1.0)
    label: str = "ü \"q\""


def echo(req: EchoRequest) -> dict:
    """A made-up section's compute: an exact function of its request."""
    return {"k": req.k, "kx": req.k * req.x, "label": req.label, "list": [1, 2, 3]}


ECHO = Section("_test_echo", "POST", "/api/_test_echo", EchoRequest, echo, "test", "A section of this test only",
               lru=8, static=lambda grid: [EchoRequest(k=1), EchoRequest(k=2, x=0.25)],
               script="js/_test_echo.js", after="norms")
# Its JS module: a figure that draws its box from the section's answer, live or static.
ECHO_JS = """(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  DL.figures = DL.figures || {};
  DL.figures._test_echo = function (source, showError) {
    const box = DL.h("section", { id: "_test_echo" });
    document.querySelector("main").append(box);
    return {
      update() {
        source.section("_test_echo", { k: 2, x: 0.25 }).then((r) => { box.textContent = String(r.kx); }).catch(showError);
      },
      relabel() {},
    };
  };
})();
"""


@pytest.fixture()
def with_echo(monkeypatch, tmp_path_factory):
    """The test's section registered, its module beside a copy of the page's static files."""
    import shutil

    from depthlab.web import app

    static = tmp_path_factory.mktemp("page") / "static"
    shutil.copytree(sections.STATIC, static)
    (static / ECHO.script).write_text(ECHO_JS, encoding="utf-8")
    for module in (sections, export):
        monkeypatch.setattr(module, "STATIC", static)
    monkeypatch.setattr(app, "STATIC_DIR", static)
    monkeypatch.setattr(sections, "SECTIONS", [*sections.SECTIONS, ECHO])
    return ECHO


def client(runs_dir) -> TestClient:
    c = TestClient(create_app(runs_dir, warm=False))
    meta = c.get("/api/meta").json()
    c.headers[meta["token_header"]] = meta["write_token"]
    return c


def test_a_section_of_one_entry_gets_route_schema_meta_and_cache(with_echo, tmp_path):
    c = client(tmp_path)
    r = c.post("/api/_test_echo", json={"k": 3, "x": -0.5})
    assert r.status_code == 200 and r.json() == echo(EchoRequest(k=3, x=-0.5))
    bad = c.post("/api/_test_echo", json={"k": 10})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "k"
    assert c.post("/api/_test_echo", json={"k": 1, "y": 0}).status_code == 422  # unknown fields refused
    spec = c.get("/openapi.json").json()
    op = spec["paths"]["/api/_test_echo"]["post"]
    assert op["tags"] == ["test"] and op["summary"] == "A section of this test only"
    assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/EchoRequest")
    assert spec["components"]["schemas"]["EchoRequest"]["properties"]["k"]["maximum"] == 9
    assert {"403", "413", "415", "422"} <= set(op["responses"])  # the server's own 4xx, documented
    listed = {s["name"]: s for s in c.get("/api/meta").json()["sections"]}
    assert listed["_test_echo"] == {"name": "_test_echo", "method": "POST", "path": "/api/_test_echo",
                              "defaults": {"x": 0.5, "label": "ü \"q\""}}
    page = c.get("/").text  # its module is loaded before main.js, which builds its figure
    assert page.index('<script src="static/js/_test_echo.js">') < page.index('<script src="static/js/main.js">')
    assert c.get("/static/js/_test_echo.js").text == ECHO_JS
    cached = compute.adapter(ECHO)
    hits = cached.cache_info().hits
    c.post("/api/_test_echo", json={"k": 3, "x": -0.5})
    assert cached.cache_info().hits == hits + 1


def test_a_section_of_one_entry_is_in_the_static_export(with_echo, monkeypatch, tmp_path):
    # Only the made-up section and one built-in one, so that the export takes seconds.
    monkeypatch.setattr(sections, "SECTIONS", [sections.section("growth"), ECHO])
    html = export.export_page(tmp_path / "page", runs_dir=tmp_path / "runs", grid="small").read_text()
    blob = re.search(r'<script type="application/json" id="depthlab-data">(.*?)</script>', html, re.S).group(1)
    data = json.loads(blob.replace("<\\/", "</"))
    assert ECHO_JS.replace("</script", "<\\/script") in html  # its module, inlined
    listed = {s["name"]: s for s in data["meta"]["sections"]}
    assert listed["_test_echo"]["path"] == "/api/_test_echo" and listed["_test_echo"]["grid"] == {"k": [1, 2], "x": [0.25, 0.5]}
    want = {'{"k":1,"label":"ü \\"q\\"","x":0.5}': echo(EchoRequest(k=1)),
            '{"k":2,"label":"ü \\"q\\"","x":0.25}': echo(EchoRequest(k=2, x=0.25))}
    assert {k: v["kx"] for k, v in data["sections"]["_test_echo"].items()} == {k: v["kx"] for k, v in want.items()}
    # the list both answers repeat is stored once
    for key, answer in data["sections"]["_test_echo"].items():
        assert data["shared"][answer["list"]["$shared"]] == want[key]["list"]
    assert list(data["sections"]["growth"]) == ['{"writes":128}']
    assert data["meta"]["simulator"]["x0_static"] == list(sections.STATIC_X0_MIX)  # the page reads it


def test_the_built_in_sections_are_the_pages_routes():
    """The sections without a module of their own are the ones the page's scripts ask for
    by name (`source.section(name, ...)`), a section with a module has its file, every route
    is one section's, and each answers through its cache."""
    own = {s.script for s in sections.SECTIONS if s.script}
    scripts = [p for p in (sections.STATIC / "js").glob("*.js") if f"js/{p.name}" not in own]
    asked = {name for p in scripts for name in re.findall(r'section\("([A-Za-z_]\w*)"', p.read_text())}
    assert asked == {s.name for s in sections.SECTIONS if not s.script}
    assert all((sections.STATIC / script).is_file() for script in own)
    routes = [(s.method, s.path) for s in sections.SECTIONS]
    assert len(routes) == len(set(routes)) and all(p.startswith("/api/") for _, p in routes)
    assert compute.simulate is compute.adapter(sections.section("simulate"))
    with pytest.raises(KeyError, match="no page section 'nope'"):
        sections.section("nope")


def test_a_static_answer_is_the_live_answer():
    """A stored simulator answer is /api/simulate's answer to the same request, rounded."""
    from depthlab.web.schemas import SimulateRequest

    answers, grid = export.section_answers(sections.section("sweep"), "small")
    assert grid == {"n": [2, 8, 32, 64]}
    req = SimulateRequest(mode="collapse", n=8, g=1.5, residual="scaled", norm="rmsnorm")
    assert request_key(req) == ('{"g":1.5,"mixer":"attention","mode":"collapse","n":8,"norm":"rmsnorm",'
                                '"residual":"scaled","x0_mix":false}')
    stored, shared = export.share(export._round({"simulate": {request_key(req): compute.simulate(req)}}))
    assert stored["simulate"][request_key(req)] == export._round(compute.simulate(req)) and shared == []


def test_a_static_copy_holds_x0_mixing_on_the_plain_residual(monkeypatch):
    """x0 mixing's stored rows: the plain residual with and without the norm (a residual the
    switch applies to), keyed with x0_mix true, each the live answer; a request with the
    section's defaults filled in finds them, and every other row is keyed with x0_mix false."""
    from depthlab.variants import RESIDUAL_SPECS
    from depthlab.web.schemas import SimulateRequest, SweepRequest

    assert sections.STATIC_X0_MIX == ("plain",) and all(RESIDUAL_SPECS[r].takes_x0_mix for r in sections.STATIC_X0_MIX)
    rows = sections.switches()
    assert [(r["residual"], r["norm"]) for r in rows if r["x0_mix"]] == [("plain", "none"), ("plain", "rmsnorm")]
    from depthlab.probes.simulator_bounds import NORMS

    # every residual with each input norm it allows, then x0 mixing's rows
    settings = sum(1 if s.needs_no_norm else len(NORMS) for s in RESIDUAL_SPECS.values())
    assert len(rows) == len({request_key(r) for r in rows}) == settings + len(NORMS) * len(sections.STATIC_X0_MIX)
    monkeypatch.setitem(sections.GRIDS, "tiny", {"n": (4,), "g": (1.5,), "g_step": 1.0})
    for name, model, extra in (("sweep", SweepRequest, {}), ("simulate", SimulateRequest, {"g": 1.5})):
        answers, grid = export.section_answers(sections.section(name), "tiny")
        mixed = len(sections.mixer_switches()) if name == "simulate" else 0  # collapse only
        assert "x0_mix" not in grid and len(answers) == len(rows) * (2 if name == "simulate" else 1) + mixed
        on = model(n=4, residual="plain", x0_mix=True, **extra)
        key = request_key(sections.defaults(model) | {"n": 4, "x0_mix": True} | extra)
        assert key == request_key(on) and '"x0_mix":true' in key
        assert answers[key] == compute.adapter(sections.section(name))(on)
        off = request_key(model(n=4, residual="plain", **extra))
        assert '"x0_mix":false' in off and answers[off]["improved"] != answers[key]["improved"]
        assert sum('"x0_mix":true' in k for k in answers) == 2 * (len(answers) - mixed) // len(rows)  # 2 per mode


def test_a_static_copy_holds_the_other_mixers_in_collapse_mode_on_the_plain_residual(monkeypatch):
    """Each mixer but attention (the registry's and hybrid), collapse mode only, on the
    residuals of STATIC_MIXERS with each norm: keyed with its mixer, each the live answer."""
    from depthlab.probes.simulator_bounds import NORMS, SIM_MIXERS
    from depthlab.web.schemas import SimulateRequest

    others = [m for m in SIM_MIXERS if m != "attention"]
    rows = sections.mixer_switches()
    assert len(rows) == len(others) * len(NORMS) * len(sections.STATIC_MIXERS)
    monkeypatch.setitem(sections.GRIDS, "tiny", {"n": (4,), "g": (1.5,), "g_step": 1.0})
    answers, _ = export.section_answers(sections.section("simulate"), "tiny")
    for mixer in others:
        req = SimulateRequest(mode="collapse", n=4, g=1.5, residual="plain", mixer=mixer)
        assert answers[request_key(req)] == compute.simulate(req)
        assert answers[request_key(req)]["request"]["mixer"] == mixer
    assert not any(f'"mixer":"{m}","mode":"gradient"' in k for k in answers for m in others)


@pytest.mark.parametrize(("x", "text"), [
    (1.0, "1"), (-0.5, "-0.5"), (0.1, "0.1"), (-0.0, "0"), (100.0, "100"), (1e21, "1e+21"),
    (1e20, "100000000000000000000"), (123456789012345680000.0, "123456789012345680000"),
    (1e-6, "0.000001"), (1e-7, "1e-7"), (1.5e-7, "1.5e-7"), (2.5e-5, "0.000025"),
    (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e+308"),
    (0.1 + 0.2, "0.30000000000000004"), (1 / 3, "0.3333333333333333"), (7, "7"), (-12, "-12"),
])
def test_numbers_are_written_as_javascript_writes_them(x, text):
    assert js_number(x) == text


def test_the_key_sorts_fields_and_refuses_what_json_cannot_hold():
    assert request_key({"b": [1.0, None, True], "a": "x\n"}) == '{"a":"x\\n","b":[1,null,true]}'
    with pytest.raises(ValueError):
        js_number(math.inf)


def test_the_page_order_is_the_registry():
    """PAGE names every box of index.html once, in the page's order; each box with a figure
    is drawn by a `DL.figures[name]` its own scripts define; page_html loads every script
    once, before main.js; a section's module goes after the box its `after` names."""
    html = (sections.STATIC / "index.html").read_text(encoding="utf-8")
    boxes = re.findall(r'<section id="([\w-]+)"', html)
    assert sorted(boxes) == sorted(f.name for f in sections.PAGE)
    for f in sections.PAGE:
        code = "".join((sections.STATIC / s).read_text(encoding="utf-8") for s in f.scripts)
        assert (f"DL.figures.{f.name} = function" in code) == bool(f.scripts), f.name
    page = sections.page_html()
    loaded = re.findall(r'<script src="static/([^"]+)"></script>', page)
    assert len(loaded) == len(set(loaded)) and loaded[-1] == "js/main.js"
    assert {s for f in sections.page_figures() for s in f.scripts} <= set(loaded)
    keys = [k for f in sections.PAGE for k in f.state]
    assert len(keys) == len(set(keys))  # each state key redraws one box


def test_a_section_module_goes_where_its_after_says(with_echo, monkeypatch):
    names = [f["name"] for f in sections.page_order()]
    assert names[names.index("norms") + 1] == "_test_echo"
    monkeypatch.setattr(sections, "SECTIONS", [*sections.SECTIONS[:-1], replace(ECHO, after=None)])
    assert [f["name"] for f in sections.page_order()][-1] == "_test_echo"
    monkeypatch.setattr(sections, "SECTIONS", [*sections.SECTIONS[:-1], replace(ECHO, after="nowhere")])
    with pytest.raises(ValueError, match="after='nowhere' is no box of the page"):
        sections.page_order()
