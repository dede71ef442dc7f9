"""LayerNorm vs RMSNorm vs zero-centred RMSNorm: time per forward + backward, measured
side by side in one process on one thread, interleaved in rounds (so load on the machine
hits every candidate alike), as the `norm-type` experiment's time column.

Shapes: one norm on [16, 64, 128] (batch x tokens x d_model of a course-model step);
one block: a 1-layer course model (embedding, one block, final norm, head over 65
characters) on 16 x 64 tokens. Prints median and min wall time and the median thread
time per call, with each norm's speed relative to LayerNorm. Never asserted.

    python bench/norm_type.py [--rounds 15] [--calls 20]
"""

from __future__ import annotations

import argparse

from depthlab.experiments.norm_timing import NORMS, SHAPE, time_norms


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args()
    timing = time_norms(args.rounds, args.calls)
    print(f"{args.rounds} rounds x {args.calls} calls, one thread; shape {list(SHAPE)}")
    for what, name in (("norm", "norm alone"), ("block", "1-block model")):
        print(f"\n{name:<16} {'wall median':>12} {'wall min':>10} {'thread median':>14} "
              f"{'speed vs LayerNorm':>19}")
        ln = timing[what]["layernorm"]["thread_median_ms"]
        for k in NORMS:
            t = timing[what][k]
            print(f"{k:<22} {t['median_ms']:>6.3f} ms {t['min_ms']:>7.3f} ms "
                  f"{t['thread_median_ms']:>11.3f} ms {ln / t['thread_median_ms']:>18.2f}x")


if __name__ == "__main__":
    main()
