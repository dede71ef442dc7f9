"""The `depthlab` command line: one subcommand per job, registered from small modules.

Each module in COMMANDS has `register(subparsers)`; heavy imports (torch, the
server) happen inside the handlers so `depthlab --help` answers at once.
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading

from depthlab import __version__
from depthlab.cli.common import Parser, run_handler

# Order = order in `depthlab --help`.
COMMANDS = [
    "depthlab.cli.model_cmd",
    "depthlab.cli.train_cmd",
    "depthlab.cli.data_cmd",
    "depthlab.cli.generate_cmd",
    "depthlab.cli.hf_cmd",
    "depthlab.cli.experiment_cmd",
    "depthlab.cli.probe_cmd",
    "depthlab.cli.anatomy_cmd",
    "depthlab.cli.serve_cmd",
]


def build_parser() -> Parser:
    parser = Parser(
        prog="depthlab",
        description="depthlab: how does information get through a deep Transformer? "
        "Live probes, exact arithmetic, training runs and a local lesson page.",
        epilog="Run `depthlab COMMAND --help` for the flags of one command.",
    )

    parser.add_argument("--version", action="version", version=f"depthlab {__version__}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=Parser)
    for module in COMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def _terminate_as_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code: 0 when its work finished and was saved, 2 a refused
    input or a failed write, 3 a diverged run, 130 an interrupt (Ctrl-C or SIGTERM, at any
    moment, the second one included). Called with argv None it is the process's entry
    point: once the code is decided, SIGINT and SIGTERM are ignored while the process
    exits, so a signal that arrives after the work is saved (during the interpreter's
    shutdown, when Python would die of it with -2 or -15) leaves the code as it was."""
    entry = argv is None
    code = 130
    try:
        try:
            code = _run(argv)
        finally:
            if entry:
                _settle()
    except KeyboardInterrupt:  # a signal while a message was printed or the lock released
        if entry:
            _settle()
        print("depthlab: interrupted", file=sys.stderr)
        code = 130
    return code


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        print("depthlab: error: name a command (listed above)", file=sys.stderr)
        return 2
    # SIGTERM as Ctrl-C everywhere, not only inside the training loop (which stops at the
    # next step and saves): before the first step it killed the process and left an --out
    # holding only its lock; now the same cleanup runs and the exit is 130
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
        signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    return run_handler(args)


def _settle() -> None:
    """The exit code is decided: from here SIGINT and SIGTERM change nothing."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
