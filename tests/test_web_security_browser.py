"""In a real browser (headless Chromium): a page of another origin cannot start a run or read
the token, whatever it sends; the lesson page itself starts one with a click.

The other page is served from another port of 127.0.0.1, the worst case: the browser's own
shield for private addresses does not apply between two loopback origins, so only the
server's checks stand in the way. The background run is a stand-in process object.
"""

from __future__ import annotations

import http.server
import threading

from page_harness import ARGS, BROWSER_MARKS, CHROMIUM, sync_api

import depthlab.web.runs as runs_mod
from depthlab.web.app import create_app
from tests.servers import live_server
from tests.test_web_api import _FakeProc

pytestmark = BROWSER_MARKS

# Every way a page can send a POST to another origin without the target's consent, and
# the one way to read an answer (which needs CORS headers this server never sends).
ATTACKS = """async (target) => {
  const run = target + "/api/experiments/residual/run";
  const out = {};
  const tryIt = async (name, f) => {
    try { out[name] = await f(); } catch (e) { out[name] = "blocked: " + e.name; }
  };
  await tryIt("no-cors text/plain, empty", () => fetch(run, {method: "POST", mode: "no-cors",
      headers: {"content-type": "text/plain"}, body: ""}).then((r) => r.type));
  await tryIt("no-cors text/plain, JSON text", () => fetch(run, {method: "POST", mode: "no-cors",
      headers: {"content-type": "text/plain"}, body: '{"budget": "micro"}'}).then((r) => r.type));
  // A Blob without a type: no Content-Type header at all, which FastAPI would read as JSON.
  await tryIt("no-cors untyped Blob", () => fetch(run, {method: "POST", mode: "no-cors",
      body: new Blob(['{"budget": "micro"}'])}).then((r) => r.type));
  await tryIt("no-cors form-urlencoded", () => fetch(run, {method: "POST", mode: "no-cors",
      body: new URLSearchParams({budget: "micro"})}).then((r) => r.type));
  await tryIt("read the token", () => fetch(target + "/api/meta").then((r) => r.json())
      .then((m) => "read " + m.write_token));
  await tryIt("cors JSON", () => fetch(run, {method: "POST", headers: {"content-type": "application/json"},
      body: '{"budget": "micro"}'}).then((r) => "status " + r.status));
  await new Promise((done) => {  // a plain HTML form, posted into a hidden frame
    const frame = document.createElement("iframe");
    frame.name = "sink";
    document.body.append(frame);  // its about:blank has loaded: the next load is the answer
    frame.onload = done;
    const form = document.createElement("form");
    Object.assign(form, {method: "POST", action: run, target: "sink", enctype: "text/plain"});
    const field = document.createElement("input");
    Object.assign(field, {name: '{"budget": "micro", "x": "', value: '"}'});
    form.append(field);
    document.body.append(form);
    form.submit();
  });
  out["form text/plain"] = "sent";
  return out;
}"""


class Answers:
    """ASGI wrapper that notes (method, path, status) of every answer the app gives."""

    def __init__(self, app) -> None:
        self.app = app
        self.seen: list[tuple[str, str, int]] = []

    async def __call__(self, scope, receive, send):
        async def note(message):
            if message["type"] == "http.response.start":
                self.seen.append((scope["method"], scope["path"], message["status"]))
            await send(message)

        await self.app(scope, receive, note if scope["type"] == "http" else send)


class _Other(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        body = b"<!doctype html><html><body><p>another site</p></body></html>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_another_origin_cannot_start_a_run_and_the_page_can(tmp_path, monkeypatch):
    app = create_app(tmp_path / "runs", allowed_hosts=["127.0.0.1", "localhost"], warm=False)
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Other)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        answers = Answers(app)
        with live_server(answers) as target, sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            spawned: list[_FakeProc] = []  # patched once playwright has started its own processes
            monkeypatch.setattr(runs_mod.subprocess, "Popen",
                                lambda cmd, **kw: spawned.append(_FakeProc(cmd)) or spawned[-1])
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{other.server_address[1]}/")
            out = page.evaluate(ATTACKS, target)
            assert out["read the token"].startswith("blocked"), out
            assert out["cors JSON"].startswith("blocked"), out
            assert spawned == [], out  # nothing they sent started a run
            run = "/api/experiments/residual/run"
            # Each POST reached the server and was refused by its origin; the CORS one
            # never left the browser (its preflight got 405).
            posts = [status for method, path, status in answers.seen if (method, path) == ("POST", run)]
            assert posts == [403] * 5, answers.seen
            assert ("OPTIONS", run, 405) in answers.seen

            # The lesson page itself: its button sends the token and the run starts.
            page.goto(target + "/#lang=en")
            page.wait_for_function("() => window.DL && DL.ready", timeout=20000)
            page.click("#run-residual")
            # The progress line appears once the run was accepted (202) and its status read.
            page.wait_for_function("() => document.getElementById('progress-residual').textContent",
                                   timeout=60000)
            assert "Running" in page.inner_text("#progress-residual")
            browser.close()
    finally:
        other.shutdown()
    assert len(spawned) == 1 and spawned[0].cmd[3:6] == ["experiment", "residual", "--budget"]
