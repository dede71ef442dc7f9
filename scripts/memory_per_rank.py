"""Memory per process of one process, ddp and fsdp, from depthlab.memory's estimate: the
table in docs/training.md ("From a laptop to a GPU node") is this script's output.

    python scripts/memory_per_rank.py [--preset gpt2] [--set model.d_model=768 ...]
                                      [--batch 16] [--seq 1024] [--worlds 2 8]

--batch is the global batch (train.batch_size), split over the processes; the estimate
counts float32 (an upper bound under bfloat16) and is calibrated on CPU training steps
(depthlab.memory says how).
"""

from __future__ import annotations

import argparse
import sys

from depthlab.config import ModelConfig, apply_overrides
from depthlab.memory import human, per_rank
from depthlab.presets import get_preset


def rows(m: ModelConfig, batch: int, seq: int, worlds: list[int]) -> list[str]:
    out = ["| launch | per process: weights | grads + AdamW | activations | total |",
           "| --- | ---: | ---: | ---: | ---: |"]
    setups = [("one process", 1, "ddp", False)] + [
        (f"{kind} x {w}", w, kind, False) for w in worlds for kind in ("ddp", "fsdp")]
    setups.append((f"fsdp x {worlds[-1]}, activation checkpointing", worlds[-1], "fsdp", True))
    for label, world, kind, checkpointed in setups:
        if batch % world:
            raise SystemExit(f"--batch {batch} is not divisible by {world} processes")
        est = per_rank(m, batch // world, seq, world, kind, checkpointed)
        out.append(f"| {label} | {human(est.weights)} | {human(est.optimizer)} | "
                   f"{human(est.activations)} | {human(est.total)} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gpt2")
    ap.add_argument("--batch", type=int, default=16, help="global batch (train.batch_size)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config field, as depthlab train --set takes it")
    args = ap.parse_args(argv)
    m = apply_overrides(get_preset(args.preset), args.set).model
    print(f"{args.preset}{' ' + ' '.join(args.set) if args.set else ''}: "
          f"{m.approx_params:,} parameters, global batch {args.batch} x {args.seq} tokens\n")
    print("\n".join(rows(m, args.batch, args.seq, args.worlds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
