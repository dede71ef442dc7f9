"""The page's API: every endpoint answers, bad input is a 4xx naming the field, the
schema lists every endpoint, every response carries the CSP header."""

from __future__ import annotations

import json
import math

import pytest
from fastapi.testclient import TestClient

from depthlab.web.app import create_app

FIXTURE_EXPORT = {
    "experiment": "residual",
    "question": {"en": "What does removing the residual do?", "zh": "去掉残差会怎样?"},
    "exported_at": "2026-01-02T03:04:05Z",
    "depthlab_version": "0.1.0",
    "command": "depthlab experiment residual --budget micro --out runs",
    "budget": "micro",
    "charts": [{"id": "val_loss", "title": {"en": "Validation loss", "zh": "验证损失"},
                "x_label": {"en": "step", "zh": "步"}, "y_label": {"en": "loss", "zh": "损失"},
                "y_log": False,
                "series": [{"label": "residual", "x": [0, 10, 20], "y": [4.0, 3.0, 2.5],
                            "color": "#2e7d32", "dash": False},
                           {"label": "no residual", "x": [0, 10, 20], "y": [4.0, 3.8, 3.7],
                            "color": None, "dash": True}]}],
    "table": {"columns": ["run", "val loss"], "rows": [["residual", 2.5], ["none", 3.7]]},
    "conclusions": [{"en": "The residual helps.", "zh": "残差有用。"}],
}


@pytest.fixture()
def runs(tmp_path):
    root = tmp_path / "runs"
    (root / "residual").mkdir(parents=True)
    (root / "residual" / "export.json").write_text(json.dumps(FIXTURE_EXPORT))
    return root


@pytest.fixture()
def client(runs):
    """A client like the page: it sends the token that /api/meta gives (tests/test_web_security.py
    shows what happens without it)."""
    c = TestClient(create_app(runs, warm=False))
    meta = c.get("/api/meta").json()
    c.headers[meta["token_header"]] = meta["write_token"]
    return c


def test_page_and_static_assets_with_csp(client):
    for path in ("/", "/static/js/main.js", "/static/css/page.css",
                 "/static/vendor/uplot/uPlot.iife.min.js", "/api/meta"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-security-policy"] == "default-src 'self'; frame-ancestors 'none'"
    html = client.get("/").text
    assert "<script>" not in html and "style=" not in html  # nothing inline: CSP allows none
    assert "http://" not in html and "https://" not in html


def test_meta(client):
    m = client.get("/api/meta").json()
    assert m["limits"]["n"] == [1, 64] and m["limits"]["g"] == [0.5, 2.0]
    assert "course" in [p["name"] for p in m["presets"]]
    from depthlab.model.residual import RESIDUAL_BUILDERS

    sim = m["simulator"]  # what the page's sliders and switches read
    assert sim["depth"] == [1, 64] and sim["gain"] == [0.5, 2.0] and sim["gain_step"] == 0.05
    assert sim["residuals"] == list(RESIDUAL_BUILDERS) and sim["norms"] == ["none", "rmsnorm"]
    assert sim["cli_max_depth"] == 256
    # x0 mixing's switch: the residuals the simulator takes it with, and the mix the green
    # formula prints
    from depthlab.errors import UserError
    from depthlab.probes import StackRequest

    def takes_x0_mix(residual: str) -> bool:
        try:
            return StackRequest(residual=residual, x0_mix=True).x0_mix
        except UserError:
            return False

    assert sim["x0_mix"] == [r for r in sim["residuals"] if takes_x0_mix(r)] and "plain" in sim["x0_mix"]
    assert sim["x0_formula"] == "x ← λᵢ·x + μᵢ·x₀" and "x0_static" not in sim  # live: every one


def test_simulate_gradient_matches_probe(client):
    from depthlab.probes import StackRequest, gradient_reach

    r = client.post("/api/simulate", json={"mode": "gradient", "n": 8, "g": 1.5,
                                            "residual": "plain", "norm": "rmsnorm"}).json()
    assert len(r["naive"]["per_layer"]) == 8 and len(r["improved"]["stream_rms"]) == 9
    probe = gradient_reach(StackRequest(depth=8, gain=1.5, residual="plain", norm="rmsnorm"))
    assert r["improved"]["ratio"] == pytest.approx(probe.ratio)
    naive = gradient_reach(StackRequest(depth=8, gain=1.5))
    assert r["naive"]["ratio"] == pytest.approx(naive.ratio)


@pytest.mark.parametrize("mode", ["gradient", "collapse"])
def test_x0_mix_is_the_probes_and_changes_the_green_row(client, mode):
    """x0 mixing reaches the probe: the answer with it is compare()'s with x0_mix=True, the
    red row is the same, and the green row differs from the one without it."""
    from depthlab.probes import StackRequest
    from depthlab.probes.simulator import compare

    body = {"mode": mode, "n": 8, "g": 1.5, "residual": "plain", "norm": "rmsnorm"}
    off = client.post("/api/simulate", json=body).json()
    on = client.post("/api/simulate", json=body | {"x0_mix": True}).json()
    probe = compare(StackRequest(depth=8, gain=1.5, residual="plain", norm="rmsnorm", x0_mix=True), mode)
    assert on == json.loads(json.dumps(probe.to_json()))  # the probe's numbers, as JSON carries them
    assert on["request"]["x0_mix"] is True and off["request"]["x0_mix"] is False
    assert on["naive"] == off["naive"]  # the red row has no switches
    key = "ratio" if mode == "gradient" else "mean_cosine"
    a, b = off["improved"][key], on["improved"][key]
    assert a != pytest.approx(b, rel=1e-3)  # the mix moves the green row well past rounding
    sweep_off = client.post("/api/sweep", json={"n": 8, "residual": "scaled"}).json()
    sweep_on = client.post("/api/sweep", json={"n": 8, "residual": "scaled", "x0_mix": True}).json()
    from depthlab.probes.simulator import gain_sweep

    assert sweep_on == json.loads(json.dumps(gain_sweep(StackRequest(depth=8, residual="scaled",
                                                                     x0_mix=True)).to_json()))
    assert sweep_on["naive"] == sweep_off["naive"] and sweep_on["improved"] != sweep_off["improved"]


@pytest.mark.parametrize("residual", ["hc", "mhc", "attnres", "ngpt"])
def test_x0_mix_is_refused_where_it_does_not_apply(client, residual):
    for path, body in (("/api/simulate", {"n": 4}), ("/api/sweep", {"n": 4})):
        for lang, says in (("en", f"x0_mix: must be false with residual {residual}; "),
                           ("zh", f"x0_mix：residual 为 {residual} 时须为 false；")):
            r = client.post(path, json=body | {"residual": residual, "x0_mix": True},
                            headers={"accept-language": lang})
            assert r.status_code == 400 and r.json()["code"] == "err.x0_mix_with"
            error = r.json()["error"]
            assert "\n" not in error and error.startswith(says) and "True" not in error
            assert "residual none, plain, scaled, rezero, deepnorm" in error


def test_a_norm_is_refused_with_ngpt_in_the_page_language(client):
    for path in ("/api/simulate", "/api/sweep"):
        for lang, says in (("en", "norm: must be none with residual ngpt; "),
                           ("zh", "norm：residual 为 ngpt 时须为 none；")):
            r = client.post(path, json={"n": 4, "residual": "ngpt", "norm": "rmsnorm"},
                            headers={"accept-language": lang})
            assert r.status_code == 400 and r.json()["code"] == "err.norm_with"
            assert r.json()["error"].startswith(says)


def test_the_schema_says_which_switches_go_together(client):
    """Every residual x norm x x0_mix: /api/simulate's and /api/sweep's schemas accept the
    request exactly when the simulator takes it (200), and the others get the documented
    400, so a client that follows the schema is never refused."""
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    from depthlab.config import RESIDUALS
    from depthlab.probes.simulator_bounds import NORMS

    spec = client.get("/openapi.json").json()
    for path, model in (("/api/simulate", "SimulateRequest"), ("/api/sweep", "SweepRequest")):
        assert "400" in spec["paths"][path]["post"]["responses"]
        valid = jsonschema_rs.validator_for(
            {"$ref": f"#/components/schemas/{model}", "components": spec["components"]}).is_valid
        outcomes = set()
        for residual in RESIDUALS:
            for norm in NORMS:
                for x0_mix in (False, True):
                    body = {"n": 2, "residual": residual, "norm": norm, "x0_mix": x0_mix}
                    status = client.post(path, json=body).status_code
                    assert status == (200 if valid(body) else 400), (path, body, status)
                    outcomes.add(status)
        assert outcomes == {200, 400}  # both sides of the rule were met


def test_simulate_is_the_cli_json(client, capsys):
    """One shape for a simulator result: the API answer is what `--json` prints."""
    import json

    from depthlab.cli import main

    for mode, command in (("gradient", "gradflow"), ("collapse", "collapse")):
        api = client.post("/api/simulate", json={"mode": mode, "n": 6, "g": 0.75,
                                                  "residual": "scaled", "norm": "rmsnorm"}).json()
        assert main(["probe", command, "--depth", "6", "--gain", "0.75", "--residual", "scaled",
                     "--norm", "rmsnorm", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == api
    sweep = client.post("/api/sweep", json={"n": 6, "residual": "rezero"}).json()
    assert main(["probe", "gradflow", "--sweep", "--depth", "6", "--residual", "rezero",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == sweep


def test_simulate_collapse(client):
    r = client.post("/api/simulate", json={"mode": "collapse", "n": 4, "g": 1.0}).json()
    assert r["kind"] == "collapse" and r["request"]["residual"] == "plain"  # the page's default
    assert len(r["naive"]["rel_distance"]) == 5 and len(r["improved"]["mean_cosine"]) == 5
    assert r["naive"]["rel_distance"][-1] < r["naive"]["rel_distance"][0]


def test_sweep(client):
    r = client.post("/api/sweep", json={"n": 4, "residual": "none"}).json()
    assert r["gains"][0] == 0.5 and r["gains"][-1] == 2.0
    assert r["naive"] == r["improved"]  # no switch: the improved row is the naive one


def test_paths_norms_growth(client):
    p = client.post("/api/paths", json={"n": 2, "a": 0.5}).json()
    assert p["residual_output"] == 2.25 and p["plain_output"] == 0.25
    assert [x["value"] for x in p["paths"]] == [1.0, 0.5, 0.5, 0.25]
    big = client.post("/api/paths", json={"n": 64, "a": 10}).json()  # finite in JSON
    assert big["residual_output"] == pytest.approx(11.0 ** 64)
    n = client.post("/api/norms", json={"x": [3, 4]}).json()
    assert n["rms"] == pytest.approx(math.sqrt(12.5))
    assert n["rmsnorm"] == pytest.approx([0.8485, 1.1314], abs=1e-4)
    assert n["layernorm"] == pytest.approx([-1, 1], abs=1e-4)
    g = client.post("/api/growth", json={"writes": 16}).json()
    assert len(g["measured_rms"]) == 17 and g["expected"][16] == pytest.approx(math.sqrt(17))


def test_block_anatomy_evolution(client):
    b = client.get("/api/block", params={"preset": "course"}).json()
    assert b["slots"] == ["in"] and b["placement"] == "pre" and b["norm_label"] == "RMSNorm"
    labels = {p: client.get("/api/block", params={"preset": p}).json()["norm_label"]
              for p in ("gpt2", "qwen_next")}
    assert labels == {"gpt2": "LayerNorm", "qwen_next": "RMSNorm (1+w)"}
    assert client.get("/api/block", params={"preset": "vaswani2017"}).json()["slots"] == ["post"]
    s = client.get("/api/block", params={"preset": "course", "placement": "sandwich"}).json()
    assert s["slots"] == ["in", "out"]
    names = client.get("/api/anatomy").json()
    assert "course" in names["presets"] and "lesson-anchor" in names["configs"]
    a = client.get("/api/anatomy/course").json()
    assert a["model"]["n_layers"] == 4 and a["total_params"] > 0
    rows = client.get("/api/evolution").json()
    assert any(r["name"] == "lesson-anchor" and r["n_writes"] == 128 for r in rows)


def test_experiments_listing_export_status(client):
    items = client.get("/api/experiments").json()
    res = next(i for i in items if i["name"] == "residual")
    assert res["has_data"] and res["exported_at"] == FIXTURE_EXPORT["exported_at"]
    assert client.get("/api/experiments/residual").json() == FIXTURE_EXPORT
    st = client.get("/api/experiments/residual/status").json()
    assert st["has_data"] and st["job"] is None


class _FakeProc:
    pid = 4242

    def __init__(self, cmd, **kw):
        self.cmd = cmd
        self.done = False

    def poll(self):
        return 0 if self.done else None

    def terminate(self):
        self.done = True

    def wait(self, timeout=None):
        return 0


def test_run_starts_one_at_a_time(client, monkeypatch):
    import depthlab.web.runs as runs_mod

    started = []
    monkeypatch.setattr(runs_mod.subprocess, "Popen",
                        lambda cmd, **kw: started.append(_FakeProc(cmd)) or started[-1])
    r = client.post("/api/experiments/residual/run", json={"budget": "quick"})
    assert r.status_code == 202 and r.json()["running"]
    cmd = started[0].cmd
    assert cmd[1:5] == ["-m", "depthlab", "experiment", "residual"] and "quick" in cmd
    again = client.post("/api/experiments/residual/run", json={"budget": "micro"})
    assert again.status_code == 409 and "one at a time" in again.json()["error"]
    assert client.get("/api/experiments/residual/status").json()["job"]["running"]
    started[0].done = True
    assert client.post("/api/experiments/residual/run", json={}).status_code == 202  # budget: quick


def test_a_folder_with_only_data_is_shown_but_not_run(client, runs, monkeypatch):
    import depthlab.web.runs as runs_mod

    started = []
    monkeypatch.setattr(runs_mod.subprocess, "Popen", lambda cmd, **kw: started.append(cmd))
    (runs / "myexp").mkdir()
    (runs / "myexp" / "export.json").write_text(json.dumps(FIXTURE_EXPORT), encoding="utf-8")
    assert client.get("/api/experiments/myexp").status_code == 200  # its data is shown
    for lang, says in (("en", "not an experiment depthlab can run"), ("zh", "不是 depthlab 能运行的实验")):
        r = client.post("/api/experiments/myexp/run", json={"budget": "micro"},
                        headers={"accept-language": lang})
        assert r.status_code == 404 and r.json()["code"] == "err.not_runnable"
        assert says in r.json()["error"] and "residual" in r.json()["error"]
    assert started == []  # nothing was launched


BAD = [
    ("post", "/api/simulate", {"n": 0}, "n"),
    ("post", "/api/simulate", {"n": 65}, "n"),
    ("post", "/api/simulate", {"n": "many"}, "n"),
    ("post", "/api/simulate", {"g": 0.4}, "g"),
    ("post", "/api/simulate", {"g": 2.01}, "g"),
    ("post", "/api/simulate", {"mode": "explode"}, "mode"),
    ("post", "/api/simulate", {"residul": True}, "residul"),
    ("post", "/api/simulate", {"residual": "sometimes"}, "residual"),
    ("post", "/api/simulate", {"residual": True}, "residual"),
    ("post", "/api/simulate", {"norm": "layernorm"}, "norm"),
    ("post", "/api/simulate", {"prenorm": True}, "prenorm"),
    ("post", "/api/simulate", {"x0_mix": "yes"}, "x0_mix"),
    ("post", "/api/simulate", {"x0_mix": 1}, "x0_mix"),
    ("post", "/api/sweep", {"residual": "ngpt", "x0_mix": True}, "x0_mix"),
    ("post", "/api/sweep", {"residual": "sideways"}, "residual"),
    ("post", "/api/sweep", {"n": 100}, "n"),
    ("post", "/api/paths", {"n": 65}, "n"),
    ("post", "/api/paths", {"a": 11}, "a"),
    ("post", "/api/norms", {"x": []}, "x"),
    ("post", "/api/norms", {"x": list(range(65))}, "x"),
    ("post", "/api/norms", {"x": [1, 1e7]}, "x"),
    ("post", "/api/norms", {"x": [3, 4], "eps": 0}, "eps"),
    ("post", "/api/norms", {}, "x"),
    ("post", "/api/growth", {"writes": 100000}, "writes"),
    ("get", "/api/anatomy/course?tokens=999", None, "tokens"),
    ("get", "/api/anatomy/no-such-model", None, "config"),
    ("get", "/api/block?preset=nope", None, "preset"),
    ("get", "/api/block?preset=course&placement=sideways", None, "placement"),
    ("get", "/api/experiments/nope", None, "name"),
    ("get", "/api/experiments/nope/status", None, "name"),
    ("post", "/api/experiments/nope/run", {}, "name"),
    ("post", "/api/experiments/residual/run", {"budget": "full"}, "budget"),
    ("post", "/api/composite", {"streams": 1}, "streams"),
    ("post", "/api/composite", {"depth": 129}, "depth"),
    ("post", "/api/composite", {"spread": 0}, "spread"),
    ("post", "/api/composite", {"draws": 33}, "draws"),
    ("post", "/api/composite", {"sideways": 1}, "sideways"),
]


@pytest.mark.parametrize(("body", "says"), [
    ('{"x": [NaN]}', ["x.0: Input should be a finite number"]),
    ('{"x": "-1000001"}', ["x.0: Input should be greater than or equal to -1000000"]),
    ('{"x": ["3", "4"]}', ["x.0: Input should be a valid number", "x.1: Input should be a valid number"]),
    ('{"x": 5}', ['x: Input should be an array of numbers or text like "3, 4"']),
    ('{"x": null}', ['x: Input should be an array of numbers or text like "3, 4"'])])
def test_a_vector_whose_every_item_fails_names_the_items_only(client, body, says):
    # pydantic adds "x: should have at least 1 item" when no item validates: not said, since
    # items were sent; and no Python type name ("tuple") for a vector that is no array
    r = client.post("/api/norms", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["error"].split("; ") == says
    zh = client.post("/api/norms", content=body, headers={"content-type": "application/json",
                                                          "accept-language": "zh"}).json()["error"]
    assert "至少" not in zh and len(zh.split("；")) == len(says)


@pytest.mark.parametrize("body", [b"[" * 30000 + b"]" * 30000, b'{"n": 1' + b"0" * 5000 + b"}"])
def test_a_body_json_cannot_read_says_why_in_both_languages(client, body):
    # nested past the recursion limit, or an integer over Python's 4,300 digits: valid
    # UTF-8, so not "cannot be decoded"; the reason names every limit
    for lang, says in (("en", "nested a few hundred levels"), ("zh", "嵌套至多几百层")):
        r = client.post("/api/paths", content=body, headers={"content-type": "application/json",
                                                            "accept-language": lang})
        assert r.status_code == 422 and r.json()["code"] == "err.body_unreadable"
        assert r.json()["error"].startswith("body") and says in r.json()["error"]


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/api/simulate", '{"g": NaN}', "g"), ("/api/simulate", '{"g": -Infinity}', "g"),
    ("/api/paths", '{"a": Infinity}', "a"), ("/api/composite", '{"spread": NaN}', "spread"),
    ("/api/norms", '{"x": [3, 4], "eps": NaN}', "eps")])
def test_nan_and_infinity_are_refused_as_not_finite(client, path, body, field):
    # not "should be less than or equal to 2": NaN is no number to compare with a bound
    for lang, says in (("en", "finite number"), ("zh", "有限")):
        r = client.post(path, content=body, headers={"content-type": "application/json",
                                                     "accept-language": lang})
        assert r.status_code == 422 and r.json()["error"].startswith(field), r.text
        assert says in r.json()["error"] and "equal" not in r.json()["error"]


@pytest.mark.parametrize("method,path,body,field", BAD)
def test_bad_input_is_4xx_naming_the_field(client, method, path, body, field):
    r = client.post(path, json=body) if method == "post" else client.get(path)
    assert 400 <= r.status_code < 500, r.text
    assert field in r.json()["error"]


@pytest.mark.parametrize("content", [b"{not json", b'{"x": [NaN]}', b"[1, 2]", b""])
def test_malformed_bodies(client, content):
    for path in ("/api/simulate", "/api/norms"):
        r = client.post(path, content=content, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500 and r.json()["error"]


def test_no_cdn_docs_viewer(client):
    # FastAPI's /docs and /redoc pull scripts from a CDN; the page loads nothing external.
    assert client.get("/docs").status_code == 404
    assert client.get("/redoc").status_code == 404


def test_openapi_lists_every_endpoint(client):
    spec = client.get("/openapi.json").json()
    assert spec["openapi"].startswith("3.") and spec["info"]["title"]
    expected = {("/api/meta", "get"), ("/api/simulate", "post"), ("/api/sweep", "post"),
                ("/api/paths", "post"), ("/api/norms", "post"), ("/api/growth", "post"),
                ("/api/block", "get"), ("/api/anatomy", "get"), ("/api/anatomy/{config}", "get"),
                ("/api/evolution", "get"), ("/api/experiments", "get"),
                ("/api/experiments/{name}", "get"), ("/api/experiments/{name}/status", "get"),
                ("/api/experiments/{name}/run", "post"), ("/api/composite", "post"),
                ("/api/frontier", "get")}
    found = {(p, m) for p, ops in spec["paths"].items() for m in ops}
    assert expected <= found
    schemas = spec["components"]["schemas"]
    for path, method in expected:
        op = spec["paths"][path][method]
        assert op["responses"] and op.get("summary")
        ref = op.get("requestBody", {}).get("content", {}).get("application/json", {}) \
            .get("schema", {}).get("$ref")
        if ref:
            assert ref.split("/")[-1] in schemas
    sim = schemas["SimulateRequest"]
    assert sim["properties"]["n"]["maximum"] == 64 and sim["additionalProperties"] is False


def test_trusted_hosts_refuse_other_names(runs):
    c = TestClient(create_app(runs, allowed_hosts=["127.0.0.1"], warm=False),
                   base_url="http://127.0.0.1")
    assert c.get("/api/meta").status_code == 200
    for lang, says in (("en", "host: 'evil.example' is not a name of this server; it answers to 127.0.0.1"),
                       ("zh", "host：'evil.example' 不是这台服务器的名字")):
        r = c.get("/api/meta", headers={"host": "evil.example", "accept-language": lang})
        assert r.status_code == 400 and r.json()["code"] == "err.host"  # JSON, as every refusal
        assert r.json()["error"].startswith(says)
    for host in ("evil.example:80", "127.0.0.1.evil.example", "", "127.0.0.1:notaport", "[::1"):
        assert c.get("/api/meta", headers={"host": host}).status_code == 400, host
    assert c.get("/api/meta", headers={"host": "127.0.0.1:8123"}).status_code == 200
    six = TestClient(create_app(runs, allowed_hosts=["127.0.0.1", "[::1]", "::1"], warm=False))
    assert six.get("/api/meta", headers={"host": "[::1]:8123"}).status_code == 200
    assert six.get("/api/meta", headers={"host": "[::2]:8123"}).status_code == 400


def test_answers_are_cached(client):
    from depthlab.web import compute

    body = {"mode": "gradient", "n": 3, "g": 0.75}
    client.post("/api/simulate", json=body)
    hits = compute.simulate.cache_info().hits
    client.post("/api/simulate", json=body)
    assert compute.simulate.cache_info().hits == hits + 1


def test_a_cached_answer_keeps_the_sign_of_zero(client):
    """-0.0 == 0.0 and they hash alike; the norms panel echoes its vector, so the answer for
    [0.0, 1] must not be handed to [-0.0, 1] (nor the other way)."""
    for first, second in (([0.0, 1.0], [-0.0, 1.0]), ([-0.0, 2.0], [0.0, 2.0])):
        answers = [client.post("/api/norms", json={"x": x}).json() for x in (first, second)]
        for x, answer in zip((first, second), answers, strict=True):
            assert [math.copysign(1, v) for v in answer["x"]] == [math.copysign(1, v) for v in x]


@pytest.mark.parametrize("depth, draws, says", [
    (1, 1, "After 1 write HC's composite gain is {a} (one draw)"),
    (1, 3, "After 1 write HC's composite gain is {a} (median of 3 draws;"),
    (4, 1, "After 4 writes HC's composite gain is {a} (one draw)"),
    (4, 3, "After 4 writes HC's composite gain is {a} (median of 3 draws;")])
def test_the_composite_reading_says_one_write_and_one_draw(client, depth, draws, says):
    r = client.post("/api/composite", json={"depth": depth, "draws": draws}).json()
    a = r["reading"]["en"].split(" is ", 1)[1].split(" ", 1)[0]
    assert r["reading"]["en"].startswith(says.format(a=a)), r["reading"]["en"]
    assert ("一次抽样" in r["reading"]["zh"]) == (draws == 1)


def test_composite_gain_is_pythons(client):
    from depthlab.probes.mixing import composite_gain, random_mixing
    from depthlab.probes.simulator_mixing import composite_curves

    r = client.post("/api/composite", json={"streams": 3, "depth": 12, "spread": 0.3, "draws": 5})
    assert r.status_code == 200
    got = r.json()
    assert got == composite_curves(3, 12, 0.3, 5).to_json()
    assert got["depth"] == list(range(1, 13))
    # the median at depth 12 is the median of each draw's gain of its 12-matrix product
    for name, constrained in (("hc", False), ("mhc", True)):
        gains = sorted(composite_gain(random_mixing(3, 12, 0.3, seed, constrained)) for seed in range(5))
        assert got[name]["median"][-1] == pytest.approx(gains[2], rel=1e-12)
        assert got[name]["lo"][-1] == pytest.approx(gains[0], rel=1e-12)
        assert got[name]["hi"][-1] == pytest.approx(gains[-1], rel=1e-12)
    # the page's default: 60 writes, HC grows by an order of magnitude, mHC stays at 1
    page = client.post("/api/composite", json={}).json()
    assert len(page["depth"]) == 60 and page["hc"]["median"][-1] > 10
    assert all(abs(v - 1) < 1e-3 for v in page["mhc"]["lo"] + page["mhc"]["hi"])


def test_frontier_absent_present_and_corrupt(client, runs):
    r = client.get("/api/frontier")
    assert r.status_code == 200
    assert r.json() == {"has_data": False, "frontier": None,
                        "command": f"depthlab experiment residual-frontier --budget quick --out {runs}"}
    folder = runs / "residual-frontier"
    folder.mkdir()
    (folder / "frontier.json").write_text('{"seeds": 3, "arms": {}', encoding="utf-8")  # cut short
    body = client.get("/api/frontier").json()
    assert body["has_data"] is False and "frontier.json is not a readable JSON object" in body["error"]
    # readable JSON without what the page draws: an answer with the reason, never a 500
    for broken, says in (({"arms": {"x": 1}}, "TypeError"), ({"arms": {"x": {}}}, "KeyError: 'depth'"),
                         ({"arms": [1]}, "'arms' is not an object"), ({"seeds": 3}, "'arms' is not an object")):
        (folder / "frontier.json").write_text(json.dumps(broken), encoding="utf-8")
        r = client.get("/api/frontier")
        assert r.status_code == 200, broken
        body = r.json()
        assert body["has_data"] is False and body["frontier"] is None, broken
        assert "frontier.json lacks what the page draws" in body["error"] and says in body["error"]
    data = {"seeds": 3, "baselines": {"unigram": 3.3}, "arms": {}, "learned": {}, "timing": {}}
    (folder / "frontier.json").write_text(json.dumps(data), encoding="utf-8")
    body = client.get("/api/frontier").json()
    # a file without the page's readings (written before they were shipped) gets them
    assert body["has_data"] is True and body["frontier"] == {**data, "readings": {}} and "error" not in body


def test_simulate_takes_the_mixer_and_refuses_it_where_it_does_not_apply(client):
    """mixer: collapse mode answers each of SIM_MIXERS as the CLI's JSON; gradient mode, the
    sweep and a residual the model's DeltaNet layer refuses get one line in the page's
    language; an unknown mixer is a 422 naming the field; the schema says all of it."""
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    from depthlab.config import DELTANET_REFUSES_RESIDUAL
    from depthlab.probes import StackRequest, compare
    from depthlab.probes.simulator_bounds import SIM_MIXERS
    from depthlab.variants import RESIDUAL_SPECS

    refused = [r for r, s in RESIDUAL_SPECS.items() if any(a(s) for a, _ in DELTANET_REFUSES_RESIDUAL)]
    spec = client.get("/openapi.json").json()
    valid = {m: jsonschema_rs.validator_for({"$ref": f"#/components/schemas/{m}",
                                              "components": spec["components"]}).is_valid
             for m in ("SimulateRequest", "SweepRequest")}
    for mixer in SIM_MIXERS:
        body = {"mode": "collapse", "n": 4, "mixer": mixer}
        r = client.post("/api/simulate", json=body)
        assert r.status_code == 200 and valid["SimulateRequest"](body)
        assert r.json() == json.loads(json.dumps(
            compare(StackRequest(depth=4, residual="plain", mixer=mixer), "collapse").to_json()))
        if mixer == "attention":
            continue
        for path, body, code in (("/api/simulate", {"n": 4, "mixer": mixer}, "err.mixer_mode"),
                                 *(("/api/simulate", {"mode": "collapse", "n": 4, "mixer": mixer,
                                                      "residual": res}, "err.mixer_with")
                                   for res in refused)):
            assert not valid["SimulateRequest"](body)
            for lang, says in (("en", "mixer: must be attention"), ("zh", "mixer：")):
                r = client.post(path, json=body, headers={"accept-language": lang})
                assert r.status_code == 400 and r.json()["code"] == code
                assert r.json()["error"].startswith(says) and "\n" not in r.json()["error"]
        assert not valid["SweepRequest"]({"n": 4, "mixer": mixer})
        assert client.post("/api/sweep", json={"n": 4, "mixer": mixer}).status_code == 400
    r = client.post("/api/simulate", json={"mode": "collapse", "n": 4, "mixer": "mamba"})
    assert r.status_code == 422 and r.json()["error"].startswith("mixer: ")
