"""Latency of the lesson page's simulator: input event -> redrawn chart, at N = 32.

Starts `depthlab serve` on a free loopback port, opens the page in headless Chromium,
and moves the g slider through every step from 0.5 to 2.0 under each setting of the
switches, residual x norm (fresh states: neither the server's nor the page's cache has them), one
move at a time. The page stamps the input event and, after the charts are redrawn
and the next frame painted, records the difference (DL.perf in static/js). Prints
p50/p95/max per mode. Target on a 2-core laptop: p95 < 100 ms. Never asserted.

    python bench/page_latency.py [--modes gradient collapse] [--rounds 1]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
GAINS = [round(0.5 + 0.05 * i, 2) for i in range(31)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "depthlab", "serve", "--port", str(port),
                             "--runs", "/nonexistent-runs-dir"],
                            stdout=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/meta", timeout=1)
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start")


def measure(page, mode: str, switches: tuple[str, str]) -> list[float]:
    residual, norm = switches
    page.goto("about:blank")
    page.goto(f"{BASE}#lang=en&mode={mode}&n=32&g=1.00&residual={residual}&norm={norm}")
    page.wait_for_function("() => window.DL && DL.ready")
    try:
        page.wait_for_function("() => document.getElementById('ro-plain').dataset.n === '32'",
                               timeout=60000)
    except Exception:
        print("page state:", page.evaluate("() => [DL.errors, DL.stats, location.href]"), file=sys.stderr)
        raise
    page.wait_for_timeout(300)  # let the sweep and the other figures settle
    samples = []
    for g in GAINS:
        if g == 1.0:
            continue
        before = page.evaluate("() => DL.perf.samples.length")
        page.eval_on_selector("#g", "(el, v) => { el.value = v; "
                              "el.dispatchEvent(new Event('input', {bubbles: true})); }", g)
        page.wait_for_function(f"() => DL.perf.samples.length > {before}", timeout=30000)
        samples.append(page.evaluate("() => DL.perf.samples[DL.perf.samples.length - 1]"))
        page.wait_for_timeout(30)  # the sweep request (not timed) may still be drawing
    return samples


def report(name: str, xs: list[float]) -> None:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]
    print(f"{name:<10} n={len(xs):<4} p50 {statistics.median(xs):6.1f} ms   "
          f"p95 {p95:6.1f} ms   max {xs[-1]:6.1f} ms")


def main() -> int:
    global BASE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=["gradient", "collapse"],
                    choices=["gradient", "collapse"])
    ap.add_argument("--rounds", type=int, default=1, help="repeat over fresh servers")
    args = ap.parse_args()
    from itertools import product

    from playwright.sync_api import sync_playwright

    from depthlab.config import RESIDUALS
    from depthlab.probes.simulator_bounds import NORMS
    from depthlab.variants import RESIDUAL_SPECS

    results: dict[str, list[float]] = {m: [] for m in args.modes}
    for _ in range(args.rounds):
        port = free_port()
        BASE = f"http://127.0.0.1:{port}/"
        server = start_server(port)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                for mode in args.modes:
                    for residual, norm in product(RESIDUALS, NORMS):
                        if norm != "none" and RESIDUAL_SPECS[residual].needs_no_norm:
                            continue  # nGPT has no norm to switch on
                        results[mode] += measure(page, mode, (residual, norm))
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=10)
    print("input event -> redrawn simulator charts, N = 32, uncached states:")
    for mode, xs in results.items():
        report(mode, xs)
    report("all", [x for xs in results.values() for x in xs])
    return 0


BASE = ""

if __name__ == "__main__":
    sys.exit(main())
