"""The server under a burst (issue 34): computations on the heavy pool's own threads with a
queue limit (503 + Retry-After past it, in the request's language), cheap routes answered
while every worker is busy and the shared threadpool's 40 threads would be taken, a
refused upload answered and closed without reading its body, memory handed back when the
pool goes idle, and every answer cache bounded.

Nothing here is timed: a blocking fake computation holds the workers until the test
releases it, and every wait is on an event or a count."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import http.client
import json
import socket
import threading
from pathlib import Path

import pytest
from pydantic import Field

from depthlab.web import compute, pool, sections
from depthlab.web.app import create_app
from depthlab.web.guard import TOKEN_HEADER
from depthlab.web.schemas import Request
from depthlab.web.sections import Section
from tests.servers import live_server

ROOT = Path(__file__).resolve().parents[1]
STOP = 120  # seconds before a wait that should end at once is called a hang


class JobRequest(Request):
    k: int = Field(..., ge=0, le=1000)
    block: bool = False


class Gate:
    """A fake heavy computation: a request with block=true waits until `release`."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.running = threading.Semaphore(0)  # one count per blocked job that started

    def compute(self, req: JobRequest) -> dict:
        if req.block:
            self.running.release()
            assert self.release.wait(STOP), "the test never released its jobs"
        return {"k": req.k}


@pytest.fixture()
def gate(monkeypatch):
    g = Gate()
    job = Section("job", "POST", "/api/job", JobRequest, g.compute, "test", "A blocking job", lru=4)
    monkeypatch.setattr(sections, "SECTIONS", [*sections.SECTIONS, job])
    yield g
    g.release.set()


def post(base: str, token: str, body: dict, lang: str = "en") -> tuple[int, dict, dict]:
    port = int(base.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=STOP)
    try:
        conn.request("POST", "/api/job", body=json.dumps(body),
                     headers={"content-type": "application/json", TOKEN_HEADER: token,
                              "accept-language": lang})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), json.loads(r.read())
    finally:
        conn.close()


def get(base: str, path: str) -> int:
    port = int(base.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=STOP)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def in_threads(base: str, token: str, bodies: list[dict]) -> tuple[list, list[threading.Thread]]:
    answers: list = [None] * len(bodies)

    def send(i: int) -> None:
        answers[i] = post(base, token, bodies[i])

    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(len(bodies))]
    for t in threads:
        t.start()
    return answers, threads


def wait_admitted(app, n: int) -> None:
    """Until the pool holds `n` jobs (running or waiting), on its own count."""
    tick = threading.Event()
    for _ in range(STOP * 100):
        if app.state.heavy.admitted >= n:
            return
        tick.wait(0.01)
    raise AssertionError(f"the pool never held {n} jobs (it holds {app.state.heavy.admitted})")


def test_a_full_queue_answers_503_with_retry_after_in_the_page_language(tmp_path, gate):
    app = create_app(tmp_path / "runs", warm=False, workers=1, queue=2)
    token = app.state.write_token
    with live_server(app) as base:
        answers, threads = in_threads(base, token, [{"k": k, "block": True} for k in range(3)])
        assert gate.running.acquire(timeout=STOP)  # the one worker is computing job 0
        wait_admitted(app, 3)  # and jobs 1 and 2 wait in the queue
        for lang, word in (("en", "busy"), ("zh", "正忙")):
            status, headers, body = post(base, token, {"k": 7, "block": True}, lang)
            assert status == 503 and body["code"] == "err.server_busy", body
            assert int(headers["retry-after"]) >= 1 and word in body["error"]
            assert body["params"]["jobs"] == 3 and str(body["params"]["seconds"]) == headers["retry-after"]
        assert app.state.heavy.admitted == 3  # a refusal is never admitted
        gate.release.set()
        for t in threads:
            t.join(STOP)
    assert [a[0] for a in answers] == [200, 200, 200]
    assert [a[2] for a in answers] == [{"k": k} for k in range(3)]


def test_cheap_routes_are_answered_while_every_worker_and_the_threadpool_would_be_busy(tmp_path, gate):
    # 45 jobs admitted: more than anyio's 40 shared threads, so a server that computed on
    # them would leave /api/meta waiting for the first job to end (it never ends here).
    n = 45
    app = create_app(tmp_path / "runs", warm=False, workers=1, queue=n)
    token = app.state.write_token
    with live_server(app) as base:
        assert post(base, token, {"k": 999})[0] == 200  # computed now, cached
        answers, threads = in_threads(base, token, [{"k": k, "block": True} for k in range(n)])
        assert gate.running.acquire(timeout=STOP)
        wait_admitted(app, n)
        assert get(base, "/api/meta") == 200
        assert get(base, "/static/js/api.js") == 200
        assert get(base, "/api/experiments") == 200
        assert post(base, token, {"k": 999})[:3:2] == (200, {"k": 999})  # a cached answer
        assert not gate.release.is_set() and answers.count(None) == n  # all still blocked
        gate.release.set()
        for t in threads:
            t.join(STOP)
    assert sorted(a[2]["k"] for a in answers) == list(range(n))


def test_the_pool_hands_memory_back_when_it_goes_idle(monkeypatch):
    trims = []
    monkeypatch.setattr(pool, "release_memory", lambda: trims.append(1))
    heavy = pool.HeavyPool(workers=1, queue=4)
    release = threading.Event()
    try:
        jobs = [heavy.submit(release.wait, STOP) for _ in range(3)]
        assert trims == []
        release.set()
        for j in jobs:
            j.result(STOP)
        tick = threading.Event()  # the done callbacks run on the worker after result()
        for _ in range(STOP * 100):
            if heavy.admitted == 0:
                break
            tick.wait(0.01)
        assert heavy.admitted == 0
    finally:
        heavy.shutdown()
    assert 1 <= len(trims) <= 3


def test_a_refused_write_is_answered_and_closed_without_reading_its_body(tmp_path):
    app = create_app(tmp_path / "runs", warm=False)
    pulled = []

    def body():
        for _ in range(16384):  # 1 GiB offered
            pulled.append(1)
            yield b"1" * 65536

    chunks = body()
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": next(chunks), "more_body": True}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/api/simulate", "raw_path": b"/api/simulate",
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                         (b"transfer-encoding", b"chunked")]}
    asyncio.run(app(scope, receive, send))
    start = sent[0]
    assert start["status"] == 403
    assert (b"connection", b"close") in start["headers"]
    assert pulled == []  # not one chunk of the body was read


def test_a_refused_upload_is_not_read_on_a_real_socket(tmp_path):
    # 200 MB offered without the token: the 403 comes and the connection closes, so the
    # sender is stopped long before the end (uvicorn would otherwise read it all).
    app = create_app(tmp_path / "runs", warm=False)
    offered = 200 * 2**20
    with live_server(app) as base:
        port = int(base.rsplit(":", 1)[1])
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(f"POST /api/norms HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                  "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"%x\r\n" % 65536 + b"1" * 65536 + b"\r\n"
        sent = 0
        with contextlib.suppress(OSError):  # reset or broken pipe once the server closes
            while sent < offered:
                s.sendall(chunk)
                sent += 65536
        answer = b""
        with contextlib.suppress(OSError):
            while piece := s.recv(65536):
                answer += piece
        s.close()
    assert sent < 32 * 2**20, f"the server read {sent} bytes of a body it refused"
    assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
    assert b"connection: close" in answer.lower()


def test_a_section_cache_keeps_at_most_its_size():
    calls = []
    answers = compute.Answers(lambda req: calls.append(req) or req * 2, maxsize=3)
    for k in range(10):
        assert answers(k) == 2 * k
    assert answers.cache_info().currsize == 3
    assert answers.peek(9) == 18 and answers.peek(6) is compute.MISS
    answers(9)
    assert calls == list(range(10))  # 9 came from the cache


def _caches(tree: ast.AST):
    """(function name, maxsize or 'unbounded', parameter count) of each cache decorator."""
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for d in node.decorator_list:
            name = ast.unparse(d.func if isinstance(d, ast.Call) else d).split(".")[-1]
            if name not in ("cache", "lru_cache"):
                continue
            size = "unbounded" if name == "cache" else 128
            if isinstance(d, ast.Call):
                given = {k.arg: k.value for k in d.keywords}
                value = given.get("maxsize", d.args[0] if d.args else None)
                size = "unbounded" if isinstance(value, ast.Constant) and value.value is None \
                    else ast.unparse(value) if value is not None else 128
            yield node.name, size, len(node.args.args)


def test_every_cache_the_server_reaches_is_bounded():
    found = []
    for path in sorted((ROOT / "depthlab").rglob("*.py")):
        for name, size, params in _caches(ast.parse(path.read_text(encoding="utf-8"))):
            found.append(name)
            where = f"{path.relative_to(ROOT)}:{name}"
            assert size != "unbounded" or params == 0, f"{where} caches without a bound"
    assert found, "no cache found: the scan is broken"
    for s in sections.SECTIONS:
        assert 1 <= compute.adapter(s).maxsize <= 4096, s.name
