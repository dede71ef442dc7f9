"""`depthlab train` end to end: tokens per CPU-second and per wall-second, one thread
against two, at the char-level Shakespeare CPU recipe shape and the course default.

Each case is the real command in a child process (`python -m depthlab train ...
--threads T`), evaluation, probes and checkpoints only at the last step. Cases run
round-robin, `--rounds` times, so load from other work on the machine falls on all
of them; the median is printed. CPU time is the child's user + system time (all its
threads), wall time the child's lifetime; tokens/s is what the run itself logs for
its training steps (metrics.jsonl). The 1-minute load average before and after says
under what load it ran.

    python bench/train_speed.py [--steps 80] [--rounds 2] [--presets gpt2 course]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = {  # label -> --set overrides
    "recipe (ctx 64, batch 12)": ["train.seq_len=64", "model.context_len=64",
                                  "train.batch_size=12"],
    "course default (ctx 128, batch 16)": [],
}


def run_once(preset: str, shape: list[str], threads: int, steps: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "depthlab", "train", "--preset", preset, "--corpus",
           "shakespeare", "--tokenizer", "char", "--steps", str(steps), "--threads",
           str(threads), "--out", str(out), "--no-progress", "--json", "--device", "cpu"]
    for override in shape + [f"train.{k}={steps}" for k in ("eval_every", "probe_every",
                                                             "ckpt_every")]:
        cmd += ["--set", override]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"depthlab train failed ({proc.returncode}): {proc.stderr[-500:]}")
    summary = json.loads(proc.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    step_rates = [r["tokens_per_s"] for r in logged if r.get("kind") == "train"]
    return {"tokens": summary["tokens"], "cpu": cpu, "wall": wall,
            "step_tokens_per_s": statistics.median(step_rates)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--presets", nargs="+", default=["gpt2", "course"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    args = ap.parse_args()
    cases = [(p, s, t) for p in args.presets for s in SHAPES for t in args.threads]
    results: dict[tuple, list[dict]] = {c: [] for c in cases}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for i, (preset, shape, threads) in enumerate(cases):
                out = Path(tmp) / f"r{r}-c{i}"
                results[(preset, shape, threads)].append(
                    run_once(preset, SHAPES[shape], threads, args.steps, out))
    print(f"depthlab train, {args.steps} steps, char Shakespeare, 4 layers, d 128; "
          f"{datetime.date.today()}; {os.cpu_count()} CPUs; 1-min load average "
          f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after; median of {args.rounds}")
    print(f"{'preset':<7} {'shape':<36} {'threads':>7} {'tokens/CPU-s':>13} "
          f"{'tokens/wall-s':>14} {'step tokens/s':>14}")
    for (preset, shape, threads), rs in results.items():
        per_cpu = statistics.median(r["tokens"] / r["cpu"] for r in rs)
        per_wall = statistics.median(r["tokens"] / r["wall"] for r in rs)
        step = statistics.median(r["step_tokens_per_s"] for r in rs)
        print(f"{preset:<7} {shape:<36} {threads:>7} {per_cpu:>13,.0f} {per_wall:>14,.0f} "
              f"{step:>14,.0f}")
    if len(args.threads) == 2:
        one, two = args.threads
        print(f"\nthreads {two} vs {one} (step tokens/s ratio; > 1: more threads faster):")
        for preset in args.presets:
            for shape in SHAPES:
                a = statistics.median(r["step_tokens_per_s"] for r in results[(preset, shape, one)])
                b = statistics.median(r["step_tokens_per_s"] for r in results[(preset, shape, two)])
                print(f"  {preset:<7} {shape:<36} {b / a:.2f}x")


if __name__ == "__main__":
    main()
