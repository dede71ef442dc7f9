"""The page's server keeps other sites and oversized requests out, and a run it started
never stays "running" after it ended: the write guard (origin, JSON, token), the body
limit (also for chunked bodies on a real socket), the CSP, and stale run status."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time

import pytest
from fastapi.testclient import TestClient

import depthlab.web.runs as runs_mod
from depthlab.web.app import create_app
from depthlab.web.guard import MAX_BODY, TOKEN_HEADER
from tests.servers import live_server
from tests.test_web_api import _FakeProc

CSP = "default-src 'self'; frame-ancestors 'none'"
RUN = "/api/experiments/residual/run"
PAGE = "http://testserver"  # TestClient's origin: what the page itself sends as Origin


@pytest.fixture()
def app(tmp_path):
    return create_app(tmp_path / "runs", warm=False)


@pytest.fixture()
def client(app):
    return TestClient(app)


@pytest.fixture()
def token(client):
    meta = client.get("/api/meta").json()
    assert meta["token_header"] == TOKEN_HEADER and len(meta["write_token"]) >= 32
    return meta["write_token"]


@pytest.fixture()
def spawned(monkeypatch):
    """The commands the server started; no process is started (the guard runs for real)."""
    started: list[_FakeProc] = []
    monkeypatch.setattr(runs_mod.subprocess, "Popen",
                        lambda cmd, **kw: started.append(_FakeProc(cmd)) or started[-1])
    return started


def page_headers(token: str, **extra: str) -> dict[str, str]:
    """What the page's fetch sends in Chromium: same origin, JSON, the token."""
    return {"origin": PAGE, "sec-fetch-site": "same-origin", "content-type": "application/json",
            TOKEN_HEADER: token, **extra}


# ---- the write guard -------------------------------------------------------------------------
def test_the_cross_site_request_of_the_issue_is_refused(client, token, spawned):
    # A foreign page's no-cors POST: empty body, text/plain, its own Origin. It used to start a run.
    r = client.post(RUN, content=b"", headers={"content-type": "text/plain",
                                                "origin": "https://evil.example",
                                                "sec-fetch-site": "cross-site"})
    assert r.status_code == 403 and "origin" in r.json()["error"]
    assert spawned == []


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://127.0.0.1:9",
                                    "http://testserver.evil.example", "https://testserver"])
def test_foreign_origin_is_refused_even_with_the_token(client, token, spawned, origin):
    for path, body in ((RUN, {"budget": "micro"}), ("/api/simulate", {"n": 4})):
        r = client.post(path, json=body, headers=page_headers(token, origin=origin))
        assert r.status_code == 403, (path, origin)
        assert set(r.json()) == {"error", "code", "params"} and "\n" not in r.json()["error"]
        assert r.json()["code"] == "err.origin" and r.json()["params"]["origin"] == origin
        assert origin in r.json()["error"]
    assert spawned == []


@pytest.mark.parametrize("site", ["cross-site", "same-site", "none"])
def test_sec_fetch_site_other_than_same_origin_is_refused(client, token, spawned, site):
    headers = page_headers(token, **{"sec-fetch-site": site})
    del headers["origin"]  # a browser that sends only Sec-Fetch-Site is judged by it
    r = client.post(RUN, json={"budget": "micro"}, headers=headers)
    assert r.status_code == 403 and "sec-fetch-site" in r.json()["error"]
    assert spawned == []


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
def test_only_json_is_accepted(client, token, spawned, content_type):
    # The first three are what a page may send cross-site without a preflight.
    headers = page_headers(token)
    headers.pop("content-type")
    if content_type:
        headers["content-type"] = content_type
    r = client.post(RUN, content=b'{"budget": "micro"}', headers=headers)
    assert r.status_code == 415 and r.json()["error"].startswith("content-type: must be application/json")
    assert spawned == []


def test_missing_or_wrong_token_is_refused(client, token, spawned):
    headers = page_headers(token)
    del headers[TOKEN_HEADER]
    r = client.post(RUN, json={"budget": "micro"}, headers=headers)
    assert r.status_code == 403 and "missing token" in r.json()["error"]
    other = TestClient(create_app(client.app.state.runs.root, warm=False))
    assert other.get("/api/meta").json()["write_token"] != token  # one token per server
    r = other.post(RUN, json={"budget": "micro"}, headers=page_headers(token))
    assert r.status_code == 403 and "wrong token" in r.json()["error"]
    assert spawned == []


def test_the_page_request_starts_the_run(client, token, spawned):
    r = client.post(RUN, json={"budget": "micro"}, headers=page_headers(token))
    assert r.status_code == 202 and r.json()["running"], r.text
    assert spawned[0].cmd[3:] == ["experiment", "residual", "--budget", "micro", "--out",
                                  str(client.app.state.runs.root)]
    with_charset = page_headers(token, **{"content-type": "application/json; charset=utf-8"})
    r = client.post("/api/simulate", json={"n": 2}, headers=with_charset)
    assert r.status_code == 200 and len(r.json()["naive"]["per_layer"]) == 2


def test_a_client_without_browser_headers_needs_json_and_the_token(client, token, spawned):
    # curl or a script: no Origin, no Sec-Fetch-Site. No web page can send such a request.
    r = client.post("/api/paths", json={"n": 2, "a": 0.5}, headers={TOKEN_HEADER: token})
    assert r.status_code == 200 and r.json()["residual_output"] == 2.25
    assert client.post("/api/paths", json={"n": 2, "a": 0.5}).status_code == 403


def test_reads_and_unknown_methods_are_not_guarded(client):
    # A foreign page may send GETs, but cannot read the answers: no CORS header is ever sent.
    r = client.get("/api/meta", headers={"origin": "https://evil.example"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    pre = client.options(RUN, headers={"origin": "https://evil.example",
                                       "access-control-request-method": "POST",
                                       "access-control-request-headers": TOKEN_HEADER})
    assert pre.status_code == 405 and "access-control-allow-origin" not in pre.headers
    assert client.put(RUN, json={}).status_code == 405  # routing first, then the guard
    assert client.delete("/api/simulate").status_code == 405


def test_routes_of_an_included_router_are_guarded_and_documented(tmp_path):
    from fastapi import APIRouter

    extra = APIRouter(prefix="/api/extra")
    calls = []

    @extra.post("/echo")
    def echo(body: dict) -> dict:
        calls.append(body)
        return body

    app = create_app(tmp_path, warm=False)
    app.include_router(extra)  # after create_app, as a feature module would
    c = TestClient(app)
    token = app.state.write_token
    assert c.post("/api/extra/echo", json={"a": 1}, headers={"origin": "https://evil.example",
                                                              TOKEN_HEADER: token}).status_code == 403
    assert c.post("/api/extra/echo", json={"a": 1}).status_code == 403
    assert c.post("/api/extra/echo", json={"a": 1}, headers=page_headers(token)).json() == {"a": 1}
    assert calls == [{"a": 1}]
    op = c.get("/openapi.json").json()["paths"]["/api/extra/echo"]["post"]
    assert {"403", "413", "415", "422"} <= set(op["responses"]) and op["security"]


# ---- body limit -------------------------------------------------------------------------------
def test_a_body_over_64_kib_is_413(client, token):
    body = json.dumps({"x": [1.0] * 40_000}).encode()  # 200 KB
    assert len(body) > 3 * MAX_BODY
    r = client.post("/api/norms", content=body, headers=page_headers(token))
    assert r.status_code == 413 and r.json()["error"].startswith("body: larger than 65536 bytes")
    assert r.headers["content-security-policy"] == CSP
    small = json.dumps({"x": [1.0] * 64}).encode()
    assert client.post("/api/norms", content=small, headers=page_headers(token)).status_code == 200


def test_a_chunked_body_is_cut_off_at_the_limit(client, token):
    # No Content-Length: the limit counts the bytes as they arrive.
    def chunks():
        yield b'{"x": ['
        for _ in range(200):
            yield b"1.0, " * 200  # 1 KB each

    headers = page_headers(token)
    r = client.post("/api/norms", content=chunks(), headers=headers)
    assert r.status_code == 413


def test_a_huge_chunked_upload_is_stopped_early_on_a_real_socket(app):
    # 200 MB offered in 64 KiB chunks: the server answers 413 and closes after about 64 KiB,
    # so the sender is stopped long before (kernel buffers hold a few MB at most).
    token = app.state.write_token
    offered = 200 * 2**20
    with live_server(app) as base:
        port = int(base.rsplit(":", 1)[1])
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(f"POST /api/norms HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                  f"Content-Type: application/json\r\n{TOKEN_HEADER}: {token}\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"%x\r\n" % 65536 + b"1" * 65536 + b"\r\n"
        sent = 0
        s.settimeout(2)
        with contextlib.suppress(OSError):  # reset or broken pipe once the server closes
            while sent < offered:
                s.sendall(chunk)
                sent += 65536
        s.settimeout(10)
        answer = b""
        with contextlib.suppress(OSError):
            while piece := s.recv(65536):
                answer += piece
        s.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"larger than 65536 bytes" in answer
    assert sent < 32 * 2**20, f"the server read {sent} bytes of a body it refused"


# ---- headers ----------------------------------------------------------------------------------
def test_frame_ancestors_on_every_answer(client, token):
    answers = [client.get("/"), client.get("/static/js/api.js"), client.get("/api/meta"),
               client.get("/api/experiments/nope"), client.post(RUN, content=b"", headers={}),
               client.post("/api/paths", json={"n": 0}, headers=page_headers(token))]
    assert [r.status_code for r in answers] == [200, 200, 200, 404, 415, 422]
    for r in answers:
        assert r.headers["content-security-policy"] == CSP
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]


def test_422_bodies_match_the_advertised_schema(client, token):
    spec = client.get("/openapi.json").json()
    ref = spec["paths"]["/api/norms"]["post"]["responses"]["422"]["content"]["application/json"]
    assert ref["schema"]["$ref"].endswith("/ValidationErrorBody")
    body = client.post("/api/norms", json={"x": [], "eps": 0, "y": 1},
                       headers=page_headers(token)).json()
    assert set(body) == {"error", "code", "params", "detail"}
    assert {d["field"] for d in body["detail"]} == {"x", "eps", "y"}
    assert all(set(d) == {"field", "message", "type", "code", "params"} and isinstance(d["params"], dict)
               and all(isinstance(d[k], str) for k in ("field", "message", "type", "code"))
               for d in body["detail"])
    assert spec["paths"]["/api/norms"]["post"]["security"] == [{"pageToken": []}]
    assert spec["components"]["securitySchemes"]["pageToken"]["name"] == TOKEN_HEADER


# ---- a run never stays "running" after it ended -------------------------------------------------
# The stand-in for `depthlab experiment`: it says "running" in status.json and then runs
# until it is killed, like an experiment stopped before it could write its last status.
STAND_IN = """
import json, os, sys, time
root, name = sys.argv[1], sys.argv[2]
os.makedirs(os.path.join(root, name), exist_ok=True)
with open(os.path.join(root, name, "status.json.tmp"), "w") as f:
    json.dump({"experiment": name, "state": "running", "runs_done": 0, "runs_total": 4}, f)
os.replace(os.path.join(root, name, "status.json.tmp"), os.path.join(root, name, "status.json"))
time.sleep(120)
"""


@pytest.fixture()
def stand_in(monkeypatch):
    monkeypatch.setattr(runs_mod.Runs, "command",
                        lambda self, name, budget: [sys.executable, "-c", STAND_IN, str(self.root), name])


def _status_file(app) -> dict:
    return json.loads((app.state.runs.root / "residual" / "status.json").read_text())


def _start_and_wait(client, token) -> int:
    r = client.post(RUN, json={"budget": "micro"}, headers=page_headers(token))
    assert r.status_code == 202, r.text
    deadline = time.time() + 30
    while time.time() < deadline:
        st = client.get("/api/experiments/residual/status").json()
        if st["status"] and st["status"]["state"] == "running":
            return r.json()["pid"]
        time.sleep(0.05)
    raise AssertionError("the stand-in never wrote its status")


def _gone(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    return not runs_mod._alive(pid, None)


def test_stopping_the_server_marks_its_run_interrupted(app, stand_in):
    with TestClient(app) as client:  # runs the app's start-up and shutdown
        pid = _start_and_wait(client, app.state.write_token)
        assert (app.state.runs.root / ".page-residual.job.json").is_file()
    assert _gone(pid)
    status = _status_file(app)
    assert status["state"] == "interrupted"
    assert "the server that started it was stopped" in status["message"]
    assert not (app.state.runs.root / ".page-residual.job.json").exists()


def test_a_killed_run_is_reported_interrupted(app, stand_in):
    client = TestClient(app)
    pid = _start_and_wait(client, app.state.write_token)
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 10
    while (st := client.get("/api/experiments/residual/status").json())["job"]["running"]:
        assert time.time() < deadline
        time.sleep(0.05)
    assert st["job"]["returncode"] == -signal.SIGKILL
    assert st["status"]["state"] == "interrupted" and _status_file(app)["state"] == "interrupted"
    assert "exit code -9" in st["status"]["message"]


def test_a_run_outlives_its_server_and_is_settled_by_the_next(app, stand_in):
    # The first server dies without its shutdown (kill -9): its run goes on, and the next
    # server shows it as running and refuses a second run beside it.
    first = TestClient(app)
    pid = _start_and_wait(first, app.state.write_token)
    second_app = create_app(app.state.runs.root, warm=False)
    second = TestClient(second_app)
    st = second.get("/api/experiments/residual/status").json()
    assert st["job"]["running"] and st["job"]["pid"] == pid
    assert st["job"]["started_by"] == "an earlier server"
    r = second.post(RUN, json={"budget": "micro"}, headers=page_headers(second_app.state.write_token))
    assert r.status_code == 409 and str(pid) in r.json()["error"]
    # Then the run dies too, before it could say so. A third server settles it at start-up.
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 10
    while not _gone(pid):
        assert time.time() < deadline
        time.sleep(0.05)
    assert _status_file(app)["state"] == "running"  # what the issue found on disk
    with TestClient(create_app(app.state.runs.root, warm=False)):
        assert _status_file(app)["state"] == "interrupted"
    assert "its process is gone" in _status_file(app)["message"]


def test_a_recorded_pid_reused_by_another_process_does_not_count_as_the_run(tmp_path):
    runs = runs_mod.Runs(tmp_path)
    (tmp_path / "residual").mkdir()
    (tmp_path / "residual" / "status.json").write_text(json.dumps({"state": "running"}))
    me = os.getpid()  # alive, but started at another time than the record says
    (tmp_path / ".page-residual.job.json").write_text(json.dumps(
        {"experiment": "residual", "pid": me, "pid_start": "1"}))
    assert runs_mod._alive(me, runs_mod._process_start(me))
    assert runs.status("residual")["job"] is None
    assert runs.status("residual")["status"]["state"] == "interrupted"
