"""`python -m depthlab ...` (and `torchrun -m depthlab train ...`)."""

import sys

from depthlab.cli import main

sys.exit(main())
