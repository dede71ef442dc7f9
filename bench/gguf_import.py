"""Time of `depthlab hf import-gguf smollm2` (read, dequantise Q4_1, write fp32), against
the 60 s budget on 2 cores. Prints the measured seconds and their ratio to the budget;
never asserted.

    python bench/gguf_import.py [--threads 2] [--repeat 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from depthlab.hf.gguf_import import import_gguf

BUDGET_S = 60.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    times = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            import_gguf("smollm2", Path(tmp) / "smollm2")
            times.append(time.perf_counter() - start)
    best = min(times)
    print(f"import-gguf smollm2 on {args.threads} threads: best {best:.1f} s of {len(times)}, "
          f"budget {BUDGET_S:.0f} s, ratio {best / BUDGET_S:.2f}")


if __name__ == "__main__":
    main()
