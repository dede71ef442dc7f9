"""Test-wide settings: one torch thread (tiny models on a 2-core machine run far
faster single-threaded, and tests may share the machine with other work)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)
