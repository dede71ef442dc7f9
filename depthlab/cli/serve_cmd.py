"""`depthlab lab`, `depthlab serve` and `depthlab export-page`: the lesson page.

`lab` is the main job: make sure the quick `residual` data exist (running the
experiment with progress if not), print its conclusions, then serve the page on
loopback and print its URL.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from pathlib import Path

from depthlab.errors import UserError, read_json_object
from depthlab.experiments import run_experiment
from depthlab.experiments.report import validate_export
from depthlab.probes import use_single_thread
from depthlab.threads import SMALL_D_MODEL, add_threads_arg, check_threads, use_threads
from depthlab.web.pool import MAX_QUEUE, MAX_WORKERS, QUEUE, WORKERS

LAB_EXPERIMENT = "residual"


def register(sub: argparse._SubParsersAction) -> None:
    lab = sub.add_parser(
        "lab", help="the main job: produce the quick residual data if missing, then serve the page",
        description="Run the quick `residual` experiment if its data are missing (with progress: "
        "a bar on a terminal, plain lines in a log), print what its data show, then serve the "
        "lesson page on loopback and print its URL. With --no-serve, stop after the data step "
        "(for CI).")
    _server_args(lab)
    lab.add_argument("--budget", default="quick", choices=("micro", "quick", "standard", "full"),
                     help="budget of the residual experiment when its data are missing (default: quick)")
    lab.add_argument("--no-serve", action="store_true", help="stop after the data step")
    lab.add_argument("--no-progress", action="store_true", help="no progress bar or lines")
    lab.add_argument("--no-real-model", action="store_true",
                     help="skip importing SmolLM2 into RUNS/smollm2 (done once when missing)")
    lab.set_defaults(handler=run_lab)

    serve = sub.add_parser(
        "serve", help="serve the lesson page locally (FastAPI + uvicorn)",
        description="Serve the lesson page and its API. Binds to 127.0.0.1 by default; the page "
        "loads nothing from outside this machine. The API schema is at /openapi.json.")
    _server_args(serve)
    serve.set_defaults(handler=run_serve)

    export = sub.add_parser(
        "export-page", help="write a self-contained HTML copy of the page that opens from disk",
        description="Write DIR/index.html: the page with its scripts, styles and data embedded "
        "and the simulator precomputed on a grid (see docs/page.md), so it opens from disk "
        "without Python.")
    export.add_argument("dir", metavar="DIR", help="output folder (created)")
    export.add_argument("--runs", type=Path, default=Path("runs"), metavar="DIR",
                        help="runs directory whose export.json files are embedded (default: runs)")
    export.add_argument("--grid", choices=("standard", "small"), default="standard",
                        help="simulator grid: standard (documented) or small (for tests)")
    export.add_argument("--no-progress", action="store_true", help="no progress bar or lines")
    export.set_defaults(handler=run_export)


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; anything else exposes the page "
                   "and its background-run button to the network)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--runs", type=Path, default=Path("runs"), metavar="DIR",
                   help="runs directory with the experiments' export.json (default: runs)")
    p.add_argument("--workers", type=int, default=WORKERS, metavar="N",
                   help=f"threads that compute the page's probes (default {WORKERS}); cheap "
                   "requests are answered beside them")
    p.add_argument("--queue", type=int, default=QUEUE, metavar="N",
                   help=f"probes that may wait for a worker (default {QUEUE}); past that the "
                   "server answers 503 with Retry-After")
    add_threads_arg(p, "torch threads for the page's probes (and for lab's experiment runs), "
                    "1 to the cores this process may use; default 0: automatic, the rule "
                    "training uses, which gives the lesson's models (d_model up to 256) one")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_pool(args: argparse.Namespace) -> None:
    """--workers and --queue within their bounds (checked before lab's data step)."""
    if not 1 <= args.workers <= MAX_WORKERS:
        raise UserError(f"--workers must be between 1 and {MAX_WORKERS}, got {args.workers}")
    if not 0 <= args.queue <= MAX_QUEUE:
        raise UserError(f"--queue must be between 0 and {MAX_QUEUE}, got {args.queue}")


def _bind(args: argparse.Namespace) -> socket.socket:
    """The page's socket, bound now: `lab` binds it before training, so a port in use is
    refused in one line at once, not after minutes of training, and stays ours."""
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, got {args.port}")
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as e:
        sock.close()
        raise UserError(f"--port {args.port}: cannot listen on {args.host}:{args.port} "
                        f"({e.strerror}); choose another with --port N (0 picks a free one)") from None
    return sock


def _serve(args: argparse.Namespace, sock: socket.socket | None = None) -> int:
    import uvicorn

    from depthlab.web.app import create_app
    from depthlab.web.server import server_config

    check_threads(args.threads)
    check_pool(args)
    sock = sock if sock is not None else _bind(args)
    loopback = _is_loopback(args.host)
    hosts = ["127.0.0.1", "localhost", "[::1]", "::1"] if loopback else None
    if not loopback:
        print(f"depthlab: warning: serving on {args.host}, reachable from other machines",
              file=sys.stderr)
    app = create_app(args.runs, allowed_hosts=hosts, workers=args.workers, queue=args.queue)
    use_threads(args.threads, SMALL_D_MODEL)  # after create_app, which sets one
    port = sock.getsockname()[1]
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    shown = f"[{shown}]" if ":" in shown else shown
    print(f"depthlab: the lesson page is at http://{shown}:{port}/  (Ctrl+C stops it)", flush=True)
    uvicorn.Server(server_config(app)).run(sockets=[sock])
    return 0


def run_serve(args: argparse.Namespace) -> int:
    return _serve(args)


def run_lab(args: argparse.Namespace) -> int:
    check_threads(args.threads)
    check_pool(args)
    sock = None if args.no_serve else _bind(args)  # a busy port: refused before any training
    try:
        return _lab(args, sock)
    finally:
        if sock is not None:
            sock.close()


def _lab(args: argparse.Namespace, sock: socket.socket | None) -> int:
    export = args.runs / LAB_EXPERIMENT / "export.json"
    if export.is_file():
        print(f"depthlab: data found: {export}")
    else:
        print(f"depthlab: no data at {export}; running `depthlab experiment {LAB_EXPERIMENT} "
              f"--budget {args.budget} --out {args.runs}`", flush=True)
        run_experiment(LAB_EXPERIMENT, budget=args.budget, out_dir=args.runs,
                       progress=not args.no_progress, threads=args.threads)
        if not export.is_file():
            raise UserError(f"the experiment finished without writing {export}")
        print(f"depthlab: data written: {export}")
    conclusions = conclusions_text(export)  # a broken export fails before the import's wait
    if not args.no_real_model:
        from depthlab.hf.gguf_import import ensure_smollm2

        ensure_smollm2(args.runs, log=lambda msg: print(f"depthlab: {msg}", flush=True),
                       progress=not args.no_progress)
    print(conclusions, flush=True)
    if sock is None:
        return 0
    return _serve(args, sock)


def conclusions_text(export: Path) -> str:
    """The experiment's question and its "what the data show" lines from export.json, so
    `lab` ends with what was learnt and not only where the files are."""
    data = read_json_object(export)
    problems = validate_export(data)
    if problems:
        raise UserError(f"{export}: {problems[0]}; delete the folder and run `depthlab lab` again")
    lines = [f"{data['experiment']} ({data['budget']} budget): {data['question']['en']}",
             "What the data show:"]
    lines += [f"  - {c['en']}" for c in data["conclusions"]] or ["  (no conclusions recorded)"]
    return "\n".join(lines)


def run_export(args: argparse.Namespace) -> int:
    from depthlab.web.export import export_page

    use_single_thread()
    path = export_page(args.dir, runs_dir=args.runs, grid=args.grid,
                       progress=not args.no_progress)
    size = path.stat().st_size / 1e6
    print(f"depthlab: wrote {path} ({size:.1f} MB); open it in a browser, no server needed")
    return 0
