"""The page's first real-model probe: what loading costs, and what one prompt costs after.

On one run (default runs/smollm2, which `depthlab hf import-gguf smollm2 --out
runs/smollm2` makes from the installed wheel), in this process, with one torch thread as
the page's server uses:

1. reading the safetensors file whole (its bytes into memory) beside `rundir.load_model`
   followed by one pass over every weight (so a lazily mapped file is really read), the
   best of REPEATS each, and their ratio;
2. the CPU seconds of each shipped prompt's first probe on the loaded model (what the
   server spends on a prompt it has not cached), and the size of its answer's JSON;
3. beside each, the floor its weight products set: their GFLOP (`product_gflop`: the
   gradient's forward and backward pass and the other probes' forward pass, the
   L(L + 1)/2 block passes and L(T - 1) LM-head rows of the block removals, the lens
   grid's (L + 1)T rows, the lens's 2L + 1 rows) over this machine's float32
   matrix-product rate, measured in the same run on one thread.

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


def product_gflop(model, n_tokens: int) -> float:
    """Multiply-adds x 2 of the probe's weight products for an n_tokens prompt (the
    attention scores, T^2 per head, left out)."""
    import torch

    T, L = n_tokens, len(model.blocks)
    block = [sum(m.weight.numel() for m in b.modules() if isinstance(m, torch.nn.Linear))
             for b in model.blocks]
    head = model.cfg.vocab_size * model.cfg.d_model
    macs = (3 * T * (sum(block) + head)  # two forward passes, a backward to the stream
            + sum((i + 1) * T * w for i, w in enumerate(block)) + L * (T - 1) * head  # removals
            + (L + 1) * T * head + (2 * L + 1) * head)  # lens grid, lens
    return 2 * macs / 1e9


def gemm_rate(d_model: int, vocab: int) -> float:
    """GFLOP/s of a float32 [512, D] x [D, V] product on this thread (best of REPEATS)."""
    import torch

    x, w = torch.randn(512, d_model), torch.randn(vocab, d_model)
    x @ w.T
    cpu = best(lambda: x @ w.T)[1]
    return 2 * 512 * d_model * vocab / cpu / 1e9


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
    rate = gemm_rate(cfg.model.d_model, cfg.model.vocab_size)
    print(f"float32 matrix products on this thread: {rate:.1f} GFLOP/s")
    for prompt in PROMPTS:
        cpu, wall = time.process_time(), time.perf_counter()
        result = probe_loaded(model, cfg, tokenizer, args.run, prompt["text"], target=prompt["target"])
        body = json.dumps({"readings": readings(result), "result": result}, ensure_ascii=False)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        T = len(result["prompt_ids"])
        flop = product_gflop(model, T)
        print(f"first probe of {prompt['id']!r} ({T} tokens) after the load: {cpu:.2f} s CPU, "
              f"{wall:.2f} s wall, answer {len(body.encode()) / 1024:.0f} KB; its weight "
              f"products {flop:.0f} GFLOP: {flop / rate:.2f} s at that rate "
              f"({cpu / (flop / rate):.2f}x)")


if __name__ == "__main__":
    main()
