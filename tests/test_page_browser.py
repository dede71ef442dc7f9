"""The lesson page in a real browser (headless Chromium): served live by uvicorn on a
free loopback port, and as a static export opened from file://."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A micro `residual` experiment: real charts from a real (tiny) run."""
    from depthlab.experiments import run_experiment

    out = tmp_path_factory.mktemp("runs")
    run_experiment("residual", budget="micro", out_dir=out, progress=False, echo=False)
    return out


@pytest.fixture(scope="module")
def server(runs):
    import uvicorn

    from depthlab.web.app import create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(runs, allowed_hosts=["127.0.0.1", "localhost"])
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}/"
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Watch:
    """Console errors and every request the page makes."""

    def __init__(self, page):
        self.errors: list[str] = []
        self.urls: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.urls.append(r.url))


def _set_range(page, selector: str, value) -> None:
    page.eval_on_selector(selector, "(el, v) => { el.value = v; "
                          "el.dispatchEvent(new Event('input', {bubbles: true})); }", value)


def _wait_readout(page, n: int) -> None:
    page.wait_for_function(f"() => document.getElementById('ro-improved').dataset.n === '{n}' && "
                           f"document.getElementById('ro-plain').dataset.n === '{n}'", timeout=15000)


def test_live_page(server, browser, runs):
    page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="en-US")
    watch = Watch(page)
    page.goto(server + "#lang=en")
    page.wait_for_function("() => window.DL && DL.ready", timeout=15000)
    _wait_readout(page, 32)

    # The N slider: the readout shows exactly what the API answers.
    _set_range(page, "#n", 8)
    _wait_readout(page, 8)
    api = page.evaluate("""() => fetch('api/meta').then(r => r.json()).then(m => fetch('api/simulate', {
        method: 'POST', headers: {'content-type': 'application/json', [m.token_header]: m.write_token},
        body: JSON.stringify({mode: 'gradient', n: 8, g: 1.0, residual: true, prenorm: false,
                              scale_writes: false})})).then(r => r.json())""")
    ratio = float(page.get_attribute("#ro-improved", "data-ratio"))
    assert ratio == pytest.approx(api["improved"]["ratio"], rel=1e-12)
    assert float(page.get_attribute("#ro-plain", "data-ratio")) == pytest.approx(api["plain"]["ratio"])
    assert "n=8" in page.url  # the state lives in the URL

    # Flipping "residual" changes the green row (and not the red one).
    plain_before = page.get_attribute("#ro-plain", "data-ratio")
    page.click("#t-residual")
    page.wait_for_function("() => document.getElementById('improved-formula').textContent === 'x ← F(x)'")
    page.wait_for_function("() => document.getElementById('ro-improved').dataset.ratio === "
                           "document.getElementById('ro-plain').dataset.ratio")
    assert float(page.get_attribute("#ro-improved", "data-ratio")) != pytest.approx(ratio)
    assert page.get_attribute("#ro-plain", "data-ratio") == plain_before

    # Project charts: the micro experiment's charts are drawn, with its export date.
    export = json.loads((runs / "residual" / "export.json").read_text())
    page.wait_for_selector("#exp-residual canvas", timeout=15000)
    assert page.locator("#exp-residual .pchart").count() == len(export["charts"])
    assert export["exported_at"] in page.inner_text("#exp-residual")

    # Language switch changes the text, and back.
    title_en = page.inner_text("h1")
    page.click("#lang")
    page.wait_for_function(f"() => document.querySelector('h1').textContent !== {json.dumps(title_en)}")
    assert "残差" in page.inner_text("h1") and "lang=zh" in page.url

    page.wait_for_timeout(300)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "page.png"), full_page=True)
    assert watch.errors == []
    assert page.evaluate("() => DL.errors") == []
    assert page.evaluate("() => DL.stats.maxInFlight") <= 12  # the first paint's parallel loads
    hosts = {urlparse(u).hostname for u in watch.urls}
    assert hosts <= {"127.0.0.1"}, hosts
    page.close()


def test_dragging_never_queues(server, browser):
    page = browser.new_page()
    page.goto(server + "#lang=en&mode=collapse&n=32")
    page.wait_for_function("() => window.DL && DL.ready", timeout=15000)
    _wait_readout(page, 32)
    before = page.evaluate("() => DL.stats.requests")
    # 40 input events in one burst: at most one request in flight, only the newest sent.
    page.evaluate("""() => { const el = document.getElementById('n');
        for (let v = 64; v > 24; v--) { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); } }""")
    _wait_readout(page, 25)
    sent = page.evaluate("() => DL.stats.requests") - before
    assert sent <= 3, sent  # the first of the burst, then the newest state
    page.close()


def test_static_export_from_file(tmp_path, browser, runs):
    from depthlab.web.export import export_page

    path = export_page(tmp_path / "page", runs_dir=runs, grid="small")
    html = path.read_text()
    assert 'src="' not in html and "href=\"static" not in html
    page = browser.new_page()
    watch = Watch(page)
    page.goto(path.as_uri() + "#lang=en&n=32&g=1.00")
    page.wait_for_function("() => window.DL && DL.ready", timeout=15000)
    _wait_readout(page, 32)
    _set_range(page, "#n", 9)  # not on the grid: snaps to 8
    _wait_readout(page, 8)
    data = page.evaluate("() => JSON.parse(document.getElementById('depthlab-data').textContent)")
    want = data["improved"]["gradient"]["8|1.00|100"]["ratio"]
    assert float(page.get_attribute("#ro-improved", "data-ratio")) == pytest.approx(want)
    page.click("#mode-collapse")
    page.wait_for_function("() => document.getElementById('ro-plain').dataset.distance !== undefined")
    page.fill("#vec", "2, 4, 6, 8")  # the norms calculator runs without a server
    page.wait_for_function("() => document.getElementById('norm-rms') && "
                           "document.getElementById('norm-rms').textContent === '5.477'")
    page.wait_for_selector("#exp-residual canvas")
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    assert all(u.startswith("file://") for u in watch.urls), watch.urls
    page.close()

