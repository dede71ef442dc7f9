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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
