"""`python -m depthlab ...` (and `torchrun -m depthlab train ...`)."""

import signal
import sys


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# SIGTERM is an interrupt from the first line (depthlab.cli.main keeps this handler), and
# one while the package loads exits 130 like any other, not Python's -2 or -15
if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _interrupt)
try:
    from depthlab.cli import main
except KeyboardInterrupt:
    sys.exit(130)

sys.exit(main())
