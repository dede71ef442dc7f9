"""Exact small arithmetic of the lesson: no randomness, closed forms beside the code.

The residual expansion (every product of (1 + a) is a sum over gradient paths), the two
norms on a small vector with every intermediate, and the depth-scaled init of the output
projections. Plain float64 arithmetic, no torch, so `depthlab probe norms 3 4` answers at
once; tests/test_cli_startup.py checks the norms against the model's own classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

from depthlab.config import ModelConfig
from depthlab.errors import UserError
from depthlab.probes.jsonsafe import json_list, json_number

MAX_PATH_DEPTH = 64
MAX_LISTED_PATHS = 16  # paths are listed one by one up to N = 4 (2^4 = 16)


@dataclass(frozen=True)
class PathGroup:
    layers_passed: int  # k: how many sublayers the path goes through
    n_paths: int  # C(N, k)
    value_each: float  # a^k
    total: float  # C(N, k) a^k


@dataclass(frozen=True)
class PathExpansion:
    """x_N = (1 + a)^N x_0 for F(x) = a x, expanded into 2^N paths grouped by k."""

    depth: int
    scale: float
    x0: float
    groups: tuple[PathGroup, ...]  # k = 0 (skip everything) ... k = N (the plain stack)
    paths: tuple[tuple[tuple[int, ...], float], ...]  # (layers passed, value), small N only
    residual_output: float  # (1 + a)^N x0 = sum of all terms
    plain_output: float  # a^N x0: the only path a plain stack keeps
    jacobian_factors: tuple[float, ...]  # dx_l/dx_{l-1} = 1 + a, per layer (I + dF/dx)
    jacobian: float  # the product: dx_N/dx_0
    plain_jacobian: float  # a^N

    def to_json(self) -> dict:
        return {
            "kind": "paths", "depth": self.depth, "scale": self.scale, "x0": self.x0,
            "groups": [vars(g) | {"value_each": json_number(g.value_each),
                                  "total": json_number(g.total)} for g in self.groups],
            "paths": [{"layers": list(p), "value": json_number(v)} for p, v in self.paths],
            "residual_output": json_number(self.residual_output),
            "plain_output": json_number(self.plain_output),
            "jacobian_factors": json_list(self.jacobian_factors),
            "jacobian": json_number(self.jacobian),
            "plain_jacobian": json_number(self.plain_jacobian),
        }


def residual_paths(depth: int = 2, scale: float = 0.5, x0: float = 1.0) -> PathExpansion:
    """Expand prod_l (1 + a) x0 for N layers of F(x) = a x (the lesson: N = 2, a = 0.5 gives
    1 + 0.5 + 0.5 + 0.25 = 2.25; a plain stack keeps only 0.25). Veit et al. 2016 read
    a residual network as this ensemble of paths."""
    if not isinstance(depth, int) or not 1 <= depth <= MAX_PATH_DEPTH:
        raise UserError(f"depth must be an integer between 1 and {MAX_PATH_DEPTH}, got {depth!r}")
    for name, value in (("scale", scale), ("x0", x0)):
        if not math.isfinite(value):
            raise UserError(f"{name} must be a finite number, got {value!r}")
    groups = tuple(
        PathGroup(k, math.comb(depth, k), scale**k, math.comb(depth, k) * scale**k * x0)
        for k in range(depth + 1)
    )
    paths: tuple = ()
    if 2**depth <= MAX_LISTED_PATHS:
        paths = tuple((layers, scale ** len(layers) * x0)
                      for k in range(depth + 1)
                      for layers in combinations(range(1, depth + 1), k))
    return PathExpansion(
        depth, scale, x0, groups, paths,
        residual_output=math.fsum(g.total for g in groups),
        plain_output=scale**depth * x0,
        jacobian_factors=tuple(1.0 + scale for _ in range(depth)),
        jacobian=(1.0 + scale) ** depth,
        plain_jacobian=scale**depth,
    )


@dataclass(frozen=True)
class NormComparison:
    """LayerNorm and RMSNorm of one vector, every intermediate, gamma = 1, beta = 0."""

    x: tuple[float, ...]
    eps: float
    mean: float
    variance: float  # biased, about the mean: what LayerNorm divides by
    mean_square: float  # about zero: what RMSNorm divides by
    rms: float  # sqrt(mean_square)
    centred: tuple[float, ...]  # x - mean
    layernorm: tuple[float, ...]
    rmsnorm: tuple[float, ...]

    def to_json(self) -> dict:
        out = {"kind": "norms"}
        out.update({k: list(v) if isinstance(v, tuple) else v for k, v in vars(self).items()})
        return out


def compare_norms(x: list[float] | tuple[float, ...], eps: float = 1e-5) -> NormComparison:
    """The lesson's [3, 4]: RMS 3.536, RMSNorm [0.849, 1.131], LayerNorm about [-1, 1]."""
    values = tuple(float(v) for v in x)
    if not values or not all(math.isfinite(v) for v in values):
        raise UserError(f"need a non-empty vector of finite numbers, got {list(x)!r}")
    if not eps > 0:
        raise UserError(f"eps must be > 0, got {eps}")
    n = len(values)
    mean = math.fsum(values) / n
    centred = tuple(v - mean for v in values)
    variance = math.fsum(c * c for c in centred) / n  # biased, as LayerNorm's paper
    mean_square = math.fsum(v * v for v in values) / n
    return NormComparison(
        x=values, eps=eps, mean=mean, variance=variance, mean_square=mean_square,
        rms=math.sqrt(mean_square), centred=centred,
        layernorm=tuple(c / math.sqrt(variance + eps) for c in centred),
        rmsnorm=tuple(v / math.sqrt(mean_square + eps) for v in values),
    )


def residual_init_std(n_layers: int, base: float = 0.02) -> float:
    """Std of the output projections: base / sqrt(2L), since L blocks make 2L writes
    (GPT-2, Radford et al. 2019). The course model: 0.02 / sqrt(8) = 0.00707."""
    if not isinstance(n_layers, int) or n_layers < 1:
        raise UserError(f"n_layers must be an integer >= 1, got {n_layers!r}")
    return ModelConfig(n_layers=n_layers, init_std=base).out_proj_std
