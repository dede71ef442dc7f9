"""Long tasks of the page's real-model section after a probe's answer arrives, beside 200 ms.

Serves the page on a runs folder (`depthlab serve` on a free loopback port; with
--static also the copy `depthlab export-page` writes, which holds the shipped prompts on
one run) and opens it in headless Chromium, in each language and at each width. For every
run the section lists and every shipped prompt that run can read, it picks the run and the
prompt and waits until the section has drawn its last figure and the page is idle. A
PerformanceObserver records every long task (> 50 ms); the ones that start after the answer
arrived (DL.realmodel.receivedAt, set by realmodel.js) are the page's own work on the data,
whatever the server took to compute them (a first-time probe takes seconds there). Each
section is drawn in a task of its own under a performance.measure named after it, so a long
task is put down to the section whose measure lies inside it ("other": layout, paint, GC).

Prints the machine's load average at start, and per copy the longest such task against the
200 ms budget as a ratio (below 1.00x is within budget), then the worst task per section and
the (run, prompt, lang, width) that gave it. Never asserted (tests never time anything).

    python bench/realmodel_long_tasks.py [--runs runs] [--static] [--langs en zh]
                                         [--widths 1400 390]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from page_latency import ARGS, CHROMIUM, free_port

from depthlab.web.realmodel import PROMPTS, RealModelProbes, list_runs

BUDGET_MS = 200
# Installed before any page script: every long task (> 50 ms), as [start, duration] in ms.
OBSERVER = """window.__longTasks = [];
new PerformanceObserver((l) => l.getEntries().forEach((e) => window.__longTasks.push(
  [e.startTime, e.duration]))).observe({type: 'longtask', buffered: true});"""
# The shown (run, prompt) and whether the section is done drawing it.
SHOWN = """() => { const r = DL.realmodel && DL.realmodel.result();
  return r && !DL.realmodel.busy ? [r.run, r.prompt] : null; }"""
# Pick a run and a prompt, from a clean slate of long tasks and marks.
PICK = """([run, id]) => { window.__longTasks = []; DL.realmodel.receivedAt = null;
  performance.clearMarks(); performance.clearMeasures(); DL.state.set({rrun: run, rp: id, rtgt: ''}); }"""
# Idle: two animation frames and an idle callback, then a pause for the observer's delivery.
IDLE = """() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() =>
  requestIdleCallback(() => setTimeout(done, 150), {timeout: 2000}))))"""
# Long tasks after the answer, each with the sections whose measure lies inside it.
COLLECT = """() => { const t0 = DL.realmodel.receivedAt;
  const ms = performance.getEntriesByType('measure').filter((m) => m.name.startsWith('rm:'));
  return window.__longTasks.filter(([s]) => s >= t0 - 1).map(([s, d]) => [Math.round(d),
    ms.filter((m) => m.startTime >= s - 1 && m.startTime <= s + d + 1).map((m) => m.name.slice(3))]); }"""


def serve(runs: Path) -> tuple[subprocess.Popen, str]:
    """`depthlab serve --runs runs` on a free loopback port, once it answers."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "depthlab", "serve", "--port", str(port),
                             "--runs", str(runs)], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "api/meta", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("the server did not start")


def combos(runs: Path, only_first: bool) -> list[tuple[str, dict]]:
    """(run, shipped prompt) pairs the section can show: the prompts each run can read."""
    names = [r["name"] for r in list_runs(runs)]
    if only_first:  # a static copy holds one run
        names = names[:1]
    probes = RealModelProbes(runs, threading.Lock())
    out = []
    for run in names:
        readable = probes.readable(run)
        out += [(run, p) for p in PROMPTS if readable.get(p["id"])]
    return out


def sweep(browser, url: str, pairs: list[tuple[str, dict]], langs: list[str], widths: list[int],
          tasks: list[tuple[int, str, str]]) -> int:
    """Append (ms, section, where) of every long task after an answer; return the draws seen."""
    seen = 0
    for lang in langs:
        for width in widths:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.add_init_script(OBSERVER)
            page.goto(f"{url}#lang={lang}")
            page.wait_for_function("() => window.DL && DL.ready", timeout=60000)
            page.wait_for_function(SHOWN, timeout=600000)
            shown = page.evaluate(SHOWN)
            # the pair on screen last (picked again it would not be drawn again)
            order = sorted(pairs, key=lambda rp: [rp[0], rp[1]["text"]] == shown)
            for run, p in order:
                if [run, p["text"]] == shown:  # the only pair: picking it again draws nothing
                    continue
                page.evaluate(IDLE)
                page.evaluate(PICK, [run, p["id"]])
                page.wait_for_function(f"(want) => DL.realmodel.receivedAt !== null && "
                                       f"JSON.stringify(({SHOWN})()) === JSON.stringify(want)",
                                       arg=[run, p["text"]], timeout=600000, polling=100)
                shown = [run, p["text"]]
                page.evaluate(IDLE)
                where = f"{run} {p['id']} {lang} {width}px"
                for ms, secs in page.evaluate(COLLECT):
                    tasks.append((ms, "+".join(secs) or "other", where))
                seen += 1
            errors = page.evaluate("() => DL.errors")
            if errors:
                print(f"page errors ({lang}, {width}px): {errors}", file=sys.stderr)
            page.close()
    return seen


def report(copy: str, tasks: list[tuple[int, str, str]], seen: int) -> None:
    worst = max(tasks, default=(0, "-", "-"))
    print(f"{copy:<7} {seen} draws, {len(tasks)} long tasks after the answer; longest {worst[0]:>4} ms = "
          f"{worst[0] / BUDGET_MS:.2f}x the {BUDGET_MS} ms budget ({worst[1]}; {worst[2]})")
    by: dict[str, tuple[int, str, str]] = {}
    for t in tasks:
        if t[1] not in by or t[0] > by[t[1]][0]:
            by[t[1]] = t
    for sec, (ms, _, where) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        print(f"        {sec:<12} worst {ms:>4} ms = {ms / BUDGET_MS:.2f}x  ({where})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=Path("runs"), help="runs folder (default: runs)")
    ap.add_argument("--static", action="store_true", help="also the exported copy")
    ap.add_argument("--langs", nargs="+", default=["en", "zh"], choices=["en", "zh"])
    ap.add_argument("--widths", nargs="+", type=int, default=[1400, 390])
    args = ap.parse_args()
    if not list_runs(args.runs):
        print(f"--runs: no run in {args.runs}; import one, e.g. "
              f"depthlab hf import-gguf smollm2 --out {args.runs}/smollm2", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)")
    results = {}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        server, url = serve(args.runs)
        try:
            tasks: list[tuple[int, str, str]] = []
            seen = sweep(browser, url, combos(args.runs, False), args.langs, args.widths, tasks)
            results["live"] = (tasks, seen)
        finally:
            server.terminate()
            server.wait(timeout=10)
        if args.static:
            subprocess.run([sys.executable, "-m", "depthlab", "export-page", str(Path(tmp) / "page"),
                            "--runs", str(args.runs), "--grid", "small", "--no-progress"],
                           check=True, stdout=subprocess.DEVNULL)
            tasks = []
            seen = sweep(browser, (Path(tmp) / "page" / "index.html").as_uri(), combos(args.runs, True),
                         args.langs, args.widths, tasks)
            results["static"] = (tasks, seen)
        browser.close()
    print(f"longest main-thread task of the real-model section after a probe's answer arrived "
          f"(every run x shipped prompt, {'+'.join(args.langs)}, {'+'.join(map(str, args.widths))} px):")
    for copy, (tasks, seen) in results.items():
        report(copy, tasks, seen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
