"""Token collapse with each token mixer of the simulator, over two seed ranges.

Prints, for N = 32 random layers (6 tokens of width 16, g = 1) and each mixer of
depthlab.probes.simulator_bounds.SIM_MIXERS, the distance from "all tokens equal" after
the last layer over the input's (r_N / r_0: 0 = collapsed, 1 = as far apart as at the
start), min / median / max over seeds 0-9 and 100-109, for the naive stack, the plain
residual and the plain residual with Pre-RMSNorm; and for a stack whose stream underflows
to exactly 0 (the naive DeltaNet), the layer where it did and r just before; and the
median of the stream's RMS after the last layer over the input's. The numbers
of docs/probes.md's paragraph on the mixers come from this script:

    python scripts/mixer_collapse.py
"""

from __future__ import annotations

import math
import statistics

from depthlab.probes.simulator import StackRequest, token_collapse
from depthlab.probes.simulator_bounds import SIM_MIXERS

DEPTH = 32
SEED_RANGES = (range(10), range(100, 110))
ROWS = (("naive", "none", "none"), ("plain", "plain", "none"), ("plain+rmsnorm", "plain", "rmsnorm"))


def measure(mixer: str, residual: str, norm: str, seeds: range) -> dict:
    """r_N / r_0 per seed (the last finite r if the stream vanished) and where it vanished."""
    ratios, vanished, growth = [], [], []
    for seed in seeds:
        res = token_collapse(StackRequest(depth=DEPTH, mixer=mixer, residual=residual, norm=norm,
                                          seed=seed))
        r = res.rel_distance
        growth.append(res.stream_rms[-1] / res.stream_rms[0])
        finite = [v for v in r if math.isfinite(v)]
        ratios.append(finite[-1] / r[0])
        if len(finite) < len(r):
            vanished.append(len(finite))  # the first layer whose stream is all zeros
    return {"ratios": ratios, "vanished": vanished, "growth": growth}


def main() -> None:
    print(f"r_N / r_0 at N = {DEPTH} (min / median / max over 10 seeds); 0 = collapsed")
    for mixer in SIM_MIXERS:
        for label, residual, norm in ROWS:
            cells = []
            for seeds in SEED_RANGES:
                m = measure(mixer, residual, norm, seeds)
                v = m["ratios"]
                cell = (f"seeds {seeds.start}-{seeds.stop - 1}: {min(v):.3g} / "
                        f"{statistics.median(v):.3g} / {max(v):.3g}, "
                        f"RMS_N/RMS_0 median {statistics.median(m['growth']):.2g}")
                if m["vanished"]:
                    cell += (f" (stream 0 from layer {min(m['vanished'])}-{max(m['vanished'])} "
                             f"in {len(m['vanished'])} seeds; r before it)")
                cells.append(cell)
            print(f"{mixer:15s} {label:14s} " + "; ".join(cells))


if __name__ == "__main__":
    main()
