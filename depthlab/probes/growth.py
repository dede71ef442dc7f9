"""The residual stream grows: x_L = x_0 + sum_l F_l adds variances.

With W independent unit-variance writes the RMS is sqrt(1 + W) (128 writes: 11.36);
the real model at init shows how the 0.02/sqrt(2L) rule (`model.scaled_init`, GPT-2)
and the 1/sqrt(N) write-back (`model.residual=scaled`) keep it flat.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

import torch

from depthlab.config import ModelConfig
from depthlab.errors import UserError
from depthlab.probes.real import RealRequest, real_probe

MAX_WRITES = 4096


@dataclass(frozen=True)
class GrowthRequest:
    writes: int = 128
    samples: int = 256  # independent streams averaged
    width: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        for name, low, high in (("writes", 1, MAX_WRITES), ("samples", 1, 4096),
                                ("width", 1, 4096)):
            value = getattr(self, name)
            if not isinstance(value, int) or not low <= value <= high:
                raise UserError(f"{name} must be an integer between {low} and {high}, got {value!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise UserError(f"seed must be an integer >= 0, got {self.seed!r}")


@dataclass(frozen=True)
class GrowthResult:
    request: GrowthRequest
    measured_rms: tuple[float, ...]  # index 0 = x_0, k = after write k
    expected: tuple[float, ...]  # sqrt(1 + k)

    def to_json(self) -> dict:
        return {"kind": "growth", "request": asdict(self.request),
                "measured_rms": list(self.measured_rms), "expected": list(self.expected)}


@lru_cache(maxsize=64)
def stream_growth(req: GrowthRequest) -> GrowthResult:
    """Add W independent unit-variance writes to a unit-variance stream; RMS after each."""
    gen = torch.Generator().manual_seed(req.seed)
    steps = torch.randn(req.writes + 1, req.samples, req.width, generator=gen, dtype=torch.float64)
    stream = steps.cumsum(dim=0)  # row 0 is x_0, row k is x_0 + F_1 + ... + F_k
    measured = stream.pow(2).mean(dim=(1, 2)).sqrt()
    expected = tuple(math.sqrt(1 + k) for k in range(req.writes + 1))
    return GrowthResult(req, tuple(measured.tolist()), expected)


@dataclass(frozen=True)
class RealGrowthRow:
    label: str
    scaled_init: bool
    residual: str
    stream_rms: tuple[float, ...]  # index 0 = embedding, k = after write k
    growth: float  # last / first


@dataclass(frozen=True)
class RealGrowthResult:
    request: RealRequest
    rows: tuple[RealGrowthRow, ...]

    def to_json(self) -> dict:
        return {"kind": "real_growth", "request": self.request.to_json(),
                "rows": [asdict(r) | {"stream_rms": list(r.stream_rms)} for r in self.rows]}


def real_growth(model: ModelConfig, tokens: int = 32, seed: int = 0) -> RealGrowthResult:
    """Stream RMS after each of the 2L writes, with and without 0.02/sqrt(2L) and 1/sqrt(N)."""
    base = RealRequest(model, tokens, seed)
    rows = []
    for scaled_init in (False, True):
        for residual in ("plain", "scaled"):
            cfg = replace(model, scaled_init=scaled_init, residual=residual)
            rms = real_probe(RealRequest(cfg, tokens, seed)).stream_rms
            label = f"init {'0.02/sqrt(2L)' if scaled_init else '0.02'}, " + (
                "write x 1/sqrt(N)" if residual == "scaled" else "plain write")
            rows.append(RealGrowthRow(label, scaled_init, residual, rms, rms[-1] / rms[0]))
    return RealGrowthResult(base, tuple(rows))
