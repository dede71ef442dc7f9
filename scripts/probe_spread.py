"""Measure the simulator probes' quantities over many seeds, so the thresholds in
tests/test_probes.py come from the measured spread (min, median, max per quantity).

    python scripts/probe_spread.py [--first 10] [--count 200]

Seeds 10..209 are the ones the thresholds were set from; the tests run on 0..9 and
on 1000..1009, which were not measured. About 0.4 s per seed on one thread.
"""

from __future__ import annotations

import argparse
import statistics

from depthlab.probes import StackRequest, gain_sweep, gradient_reach, token_collapse, use_single_thread

IMPROVED = dict(residual="scaled", norm="rmsnorm")  # x + F(RMSNorm(x)) / sqrt(N)


def measure(s: int) -> dict[str, float]:
    r8 = token_collapse(StackRequest(depth=8, seed=s)).rel_distance
    r32 = token_collapse(StackRequest(depth=32, seed=s)).rel_distance
    improved = gain_sweep(StackRequest(seed=s, **IMPROVED))
    rms = [gradient_reach(StackRequest(seed=s, gain=g, **IMPROVED)).stream_rms[-1]
           for g in (0.5, 1.0, 2.0)]
    plain, res, imp = (token_collapse(StackRequest(seed=s, **k))
                       for k in ({}, {"residual": "plain"}, IMPROVED))
    sweep = gain_sweep(StackRequest(seed=s))
    ratios = dict(zip(sweep.gains, sweep.naive_ratios, strict=True))
    band = [g for g, x in ratios.items() if 0.1 <= x <= 10]
    one = gradient_reach(StackRequest(seed=s, residual="plain"))
    return {
        "collapse r(0), 8 layers": r8[0], "collapse r(8)": r8[-1], "collapse r(32)": r32[-1],
        "all three: min ratio over g": min(improved.ratios),
        "all three: max ratio over g": max(improved.ratios),
        "all three: min final RMS (g 0.5, 1, 2)": min(rms),
        "all three: max final RMS (g 0.5, 1, 2)": max(rms),
        "plain ratio at g 0.5": ratios[0.5], "plain ratio at g 2": ratios[2.0],
        "plain band lowest g": min(band), "plain band highest g": max(band),
        "plain band gains": len(band),
        "residual only: min ratio over g": min(gain_sweep(StackRequest(seed=s, residual="plain")).ratios),
        "residual only: ratio at g 1": one.ratio,
        "residual only: final RMS / first": one.stream_rms[-1] / one.stream_rms[0],
        "residual only: collapse r(32)": res.rel_distance[-1],
        "residual only: mean cosine": res.mean_cosine[-1],
        "residual r(32) / plain r(32)": res.rel_distance[-1] / plain.rel_distance[-1],
        "all three: collapse r(32)": imp.rel_distance[-1],
        "all three: mean cosine": imp.mean_cosine[-1],
        "all three r(32) / residual r(32)": imp.rel_distance[-1] / res.rel_distance[-1],
        "residual cosine - all three cosine": res.mean_cosine[-1] - imp.mean_cosine[-1],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--first", type=int, default=10)
    p.add_argument("--count", type=int, default=200)
    args = p.parse_args()
    use_single_thread()
    rows = [measure(s) for s in range(args.first, args.first + args.count)]
    print(f"seeds {args.first}..{args.first + args.count - 1}")
    print(f"{'quantity':<42} {'min':>10} {'median':>10} {'max':>10}")
    for key in rows[0]:
        values = [r[key] for r in rows]
        print(f"{key:<42} {min(values):>10.3g} {statistics.median(values):>10.3g} "
              f"{max(values):>10.3g}")


if __name__ == "__main__":
    main()
