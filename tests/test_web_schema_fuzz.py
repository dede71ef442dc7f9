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
