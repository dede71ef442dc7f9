"""Schema-driven fuzzing of the live server: schemathesis reads /openapi.json and sends
generated requests, valid and invalid, to every operation on a loopback port. Every
check must pass: no 5xx, every status and body as the schema says (the 4xx included),
invalid input refused, valid input accepted, the token required where it is declared.

Bounded: MAX_EXAMPLES generated cases per operation and phase, one live server for all.
The background run is a stand-in process object (tests/test_web_api.py), so a fuzzed
POST /run is answered 202 and then 409 without training anything.
"""

from __future__ import annotations

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

import depthlab.web.runs as runs_mod
from depthlab.web.app import create_app
from depthlab.web.guard import TOKEN_HEADER
from tests.servers import live_server
from tests.test_web_api import FIXTURE_EXPORT, _FakeProc

MAX_EXAMPLES = 25
SEEN: dict[str, list[int]] = {}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    (root / "residual").mkdir()
    (root / "residual" / "export.json").write_text(json.dumps(FIXTURE_EXPORT))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runs_mod.subprocess, "Popen", lambda cmd, **kw: _FakeProc(cmd))
        app = create_app(root, allowed_hosts=["127.0.0.1"], warm=False)
        with live_server(app) as base:
            yield base, app.state.write_token


# The schema is loaded at collection, from the app object itself (every server serves the
# same document, as the fixture checks); the cases then go to the live server.
SPEC = create_app("runs", warm=False).openapi()
schema = schemathesis.openapi.from_dict(SPEC)


@pytest.fixture(scope="module")
def served(live):
    import requests

    base, token = live
    assert requests.get(f"{base}/openapi.json", timeout=10).json() == SPEC
    return base, token


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms_to_its_schema(case, served):
    base, token = served
    response = case.call_and_validate(base_url=base, headers={TOKEN_HEADER: token}, timeout=10)
    # A valid case carries the token and no Origin: a 403 would mean the fuzzer never got
    # past the guard (403 is an allowed answer, so the checks alone would not notice).
    if case.meta.generation.mode == schemathesis.GenerationMode.POSITIVE:
        assert response.status_code != 403, response.text
    SEEN.setdefault(f"{case.method} {case.path}", []).append(response.status_code)


# --- half-sent requests: the server bounds how long it waits for a whole request ---------

HALF_SENT = {
    "half-a-request-line": b"GET /api/me",
    "headers-without-the-blank-line": b"GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    "body-shorter-than-its-length": (b"POST /api/gradflow HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                     b"Content-Type: application/json\r\nContent-Length: 400\r\n"
                                     b"\r\n{\"depth\": "),
    "chunked-body-never-ended": (b"POST /api/gradflow HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n4\r\n{\"de\r\n"),
    "nothing-at-all": b"",
}
READ_TIMEOUT_S = 1.0  # the server's bound in this test; `depthlab serve` uses 20 s


def _closed_by_server(sock, trickle: bytes = b"") -> bool:
    """Whether the server closes the connection: recv returns b"" (or the connection is
    reset) within a bounded number of waits, trickling one byte per wait if asked."""
    sock.settimeout(0.5)
    for _ in range(60):  # 30 s at most; the bound under test is READ_TIMEOUT_S
        try:
            if trickle:
                sock.sendall(trickle)
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
        if data == b"":
            return True
        if data.startswith(b"HTTP/1.1 4"):  # a refusal (400/408) then close counts as well
            continue
    return False


def test_half_sent_requests_are_dropped(tmp_path):
    import socket

    import requests

    app = create_app(tmp_path, allowed_hosts=["127.0.0.1"], warm=False)
    with live_server(app, read_timeout_s=READ_TIMEOUT_S) as base:
        port = int(base.rsplit(":", 1)[1])
        socks = {}
        for name, data in HALF_SENT.items():
            socks[name] = socket.create_connection(("127.0.0.1", port), timeout=5)
            socks[name].sendall(data)
        trickler = socket.create_connection(("127.0.0.1", port), timeout=5)
        trickler.sendall(b"GET /api/meta HTTP/1.1\r\nX-Slow: ")
        still_open = [name for name, s in socks.items() if not _closed_by_server(s)]
        assert not still_open, still_open
        assert _closed_by_server(trickler, trickle=b"a"), "a trickled header kept its connection"
        for s in [*socks.values(), trickler]:
            s.close()
        # A whole request is still answered, and a keep-alive connection serves a second one.
        with requests.Session() as session:
            for _ in range(2):
                assert session.get(f"{base}/api/meta", timeout=10).status_code == 200
