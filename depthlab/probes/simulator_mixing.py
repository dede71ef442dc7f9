"""The composite gain chart of the page's "beyond" section: plain HC beside mHC over depth.

Hyper-connections pass the n copies of the stream through one n x n mixing matrix per
write, so after l writes the residual path carries their product; its "Amax gain" (the
larger of the largest |row sum| and |column sum|, `depthlab.probes.mixing.composite_gain`)
is what the mHC paper plots (Xie et al., DeepSeek-AI, arXiv 2512.24880, Fig. 3). HC
initialises A_r = I and training moves it away freely: here each matrix is I plus
normal(0, spread^2) noise (`random_mixing`, unconstrained). mHC makes the same logits
doubly stochastic (softmax over rows, then Sinkhorn-Knopp): every product is doubly
stochastic again, so its gain stays at 1 (up to Sinkhorn's eps).

One draw can grow or stall by chance, so the curve is the median over `draws` seeds with
the min-max over draws as a band; the seeds are 0..draws-1, the same numbers every time.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from depthlab.locales import texts
from depthlab.probes.jsonsafe import json_list
from depthlab.sigfig import sig

DEFAULT_STREAMS = 4  # DeepSeek-V4's hc_mult
DEFAULT_DEPTH = 60
DEFAULT_SPREAD = 0.2  # the size of HC's learned departure from A_r = I in this toy
DEFAULT_DRAWS = 16


@dataclass(frozen=True)
class CompositeCurves:
    """Gain over depth 1..depth, median and min-max over draws, for HC and mHC."""

    streams: int
    depth: int
    spread: float
    draws: int
    curves: dict  # "hc" | "mhc" -> {"median", "lo", "hi"}, each one value per depth

    def reading(self) -> dict[str, str]:
        """The chart's line in every language: HC's median gain after the last write and
        its largest draw, and how far mHC's band strays from 1."""
        hc, mhc = self.curves["hc"], self.curves["mhc"]
        off = max(abs(v - 1) for v in [*mhc["lo"], *mhc["hi"]])
        key = "bx.read.gain" + ("." if self.depth == 1 or self.draws == 1 else "") + (
            "w1" if self.depth == 1 else "") + ("d1" if self.draws == 1 else "")  # singulars
        return texts(key, L=self.depth, a=sig(hc["median"][-1]), hi=sig(hc["hi"][-1]),
                     draws=self.draws, d=sig(off, 2))

    def to_json(self) -> dict:
        return {"kind": "composite_gain", "streams": self.streams, "spread": self.spread,
                "draws": self.draws, "depth": list(range(1, self.depth + 1)),
                **{name: {k: json_list(v) for k, v in c.items()} for name, c in self.curves.items()},
                "reading": self.reading()}


def composite_curves(streams: int = DEFAULT_STREAMS, depth: int = DEFAULT_DEPTH,
                     spread: float = DEFAULT_SPREAD, draws: int = DEFAULT_DRAWS) -> CompositeCurves:
    """`gains_over_depth` of `draws` toy stacks of HC matrices and of the same logits
    projected as mHC projects them."""
    from depthlab.probes.mixing import gains_over_depth, random_mixing

    curves = {}
    for name, constrained in (("hc", False), ("mhc", True)):
        rows = [gains_over_depth(random_mixing(streams, depth, spread, seed, constrained))
                for seed in range(draws)]
        at = list(zip(*rows, strict=True))  # per depth: the gains of every draw
        curves[name] = {"median": [statistics.median(v) for v in at],
                        "lo": [min(v) for v in at], "hi": [max(v) for v in at]}
    return CompositeCurves(streams, depth, spread, draws, curves)
