"""The page's server under a burst: does a cheap request wait, and is memory given back?

Starts `depthlab serve` (port 0 on 127.0.0.1, an empty runs folder) as a child process,
then:

1. fires BURST heavy POSTs at once (simulator sweeps at large N, each a cache miss) and a
   cheap `GET /api/meta` as the burst starts, and prints the cheap request's latency
   beside the heavy ones', and how many heavy POSTs got 200 and 503 (the queue limit);
2. retries every 503 after its Retry-After until all BURST heavy requests are computed,
   and prints the server's RSS before, at its peak (VmHWM) and idle after;
3. offers a 1 GiB chunked POST without the write token, in 64 KiB chunks sent only while
   no answer has come, and prints the time to the 403 and how much was sent by then.

Every request has a timeout and the whole run a deadline; the server is stopped at the
end. Never asserted.

    python bench/server_burst.py [--burst 100] [--workers 1] [--queue 16]
    python bench/server_burst.py --src OTHER_CHECKOUT   # the same on another tree (its
                                                         # own defaults; no pool flags)
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from depthlab.web.sections import switches  # noqa: E402  (torch-free)

DEADLINE_S = 600
TIMEOUT_S = 300


def start(runs: Path, src: Path, pool: list[str]) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(src)}
    proc = subprocess.Popen([sys.executable, "-m", "depthlab", "serve", "--port", "0",
                             "--runs", str(runs), *pool], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=src)
    line = proc.stdout.readline()  # "the lesson page is at http://127.0.0.1:PORT/"
    found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if not found:
        proc.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    port = int(found.group(1))
    for _ in range(600):
        try:
            if request(port, "GET", "/api/meta")[0] == 200:
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not answer within 60 s")


def request(port: int, method: str, path: str, body: dict | None = None,
            headers: dict | None = None) -> tuple[int, dict, float]:
    """(status, headers, seconds) of one request on its own connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    t = time.perf_counter()
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers=headers or {})
        r = conn.getresponse()
        r.read()
        return r.status, dict(r.getheaders()), time.perf_counter() - t
    finally:
        conn.close()


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+) kB", status).group(1)) / 1024


def heavy_bodies(n: int) -> list[dict]:
    """n sweeps that no cache holds: every switch setting at N = 64, 63, ..."""
    settings = [s for s in switches() if not s["x0_mix"]]
    return [{"n": 64 - i // len(settings), **settings[i % len(settings)]} for i in range(n)]


def burst(port: int, token: str, bodies: list[dict], deadline: float) -> dict:
    """All heavy POSTs at once, each sent again after its Retry-After until it is computed,
    and a cheap GET as they start and another while the workers are still busy."""
    headers = {"content-type": "application/json", "x-depthlab-token": token}
    first: list = [None] * len(bodies)
    final: list = [None] * len(bodies)
    go = threading.Barrier(len(bodies) + 1)

    def post(i: int) -> None:
        go.wait()
        first[i] = final[i] = request(port, "POST", "/api/sweep", bodies[i], headers)
        while final[i][0] == 503 and time.time() < deadline:
            time.sleep(int(final[i][1].get("retry-after", "1")))
            final[i] = request(port, "POST", "/api/sweep", bodies[i], headers)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    go.wait()
    time.sleep(0.05)  # the burst is on its way
    cheap = request(port, "GET", "/api/meta")[2]
    while not all(first) and time.time() < deadline:
        time.sleep(0.05)
    busy = request(port, "GET", "/api/meta")[2]  # the first answers are in; work goes on
    for t in threads:
        t.join(max(1.0, deadline - time.time()))
    return {"cheap": cheap, "busy": busy, "first": first, "final": final}


def refused_upload(port: int, size: int = 2**30, chunk: int = 2**16) -> dict:
    """A chunked POST of `size` bytes without the token. A chunk goes out only while no
    answer is waiting; then: does the server close the connection (it read no more of the
    body), or keep it open, waiting to read the rest of the body before the next request?"""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    t = time.perf_counter()
    s.sendall(f"POST /api/sweep HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
              "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
    piece = b"%x\r\n" % chunk + b"1" * chunk + b"\r\n"
    sent, answer, seconds = 0, b"", float("nan")
    closed = "kept open, waiting for the rest of the body"
    try:
        while sent < size:
            readable, writable, _ = select.select([s], [s], [], 30)
            if readable:
                break
            if writable:
                s.sendall(piece)
                sent += chunk
        answer = s.recv(65536)
        seconds = time.perf_counter() - t
        s.settimeout(5)
        while s.recv(65536):
            pass
        closed = "closed by the server"
    except TimeoutError:
        pass
    except OSError:
        closed = "closed by the server"
    s.close()
    return {"seconds": seconds, "sent": sent, "status": answer.split(b"\r\n", 1)[0].decode(),
            "closed": closed}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--burst", type=int, default=100)
    p.add_argument("--workers", type=int, help="default: the server's own")
    p.add_argument("--queue", type=int, help="default: the server's own")
    p.add_argument("--src", type=Path, default=ROOT, help="the depthlab tree to serve")
    args = p.parse_args()
    pool = [*(["--workers", str(args.workers)] if args.workers else []),
            *(["--queue", str(args.queue)] if args.queue is not None else [])]
    deadline = time.time() + DEADLINE_S
    with tempfile.TemporaryDirectory() as runs:
        proc, port = start(Path(runs), args.src.resolve(), pool)
        try:
            time.sleep(5)  # the start-up warm-up of the first view ends
            token = json.loads(http_get(port, "/api/meta"))["write_token"]
            before = rss_mb(proc.pid)
            bodies = heavy_bodies(args.burst)
            got = burst(port, token, bodies, deadline)
            heavy = sorted(a[2] for a in got["first"] if a[0] == 200)
            codes = [a[0] for a in got["first"]]
            print(f"server: {args.src} {' '.join(pool) or '(its defaults)'}; {args.burst} "
                  "heavy POST /api/sweep at once")
            print(f"cheap GET /api/meta as the burst starts: {got['cheap'] * 1000:.0f} ms; "
                  f"once all were answered, workers still busy: {got['busy'] * 1000:.0f} ms")
            print(f"heavy 200s: median {heavy[len(heavy) // 2]:.2f} s, slowest {heavy[-1]:.2f} s")
            print(f"first answers: {codes.count(200)} x 200, {codes.count(503)} x 503, "
                  f"{len(codes) - codes.count(200) - codes.count(503)} other; after retrying each "
                  f"503 after its Retry-After: {sum(a[0] == 200 for a in got['final'])} of "
                  f"{args.burst} computed")
            time.sleep(3)
            print(f"server RSS: before {before:.0f} MB, peak {rss_mb(proc.pid, 'VmHWM'):.0f} MB, "
                  f"idle after {rss_mb(proc.pid):.0f} MB")
            up = refused_upload(port)
            print(f"1 GiB chunked POST without the token: {up['status']} after "
                  f"{up['seconds'] * 1000:.0f} ms, {up['sent'] / 2**20:.1f} MiB sent by then; "
                  f"the connection: {up['closed']}")
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def http_get(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    finally:
        conn.close()


if __name__ == "__main__":
    main()
