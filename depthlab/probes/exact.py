"""Exact small arithmetic of the lesson: no randomness, closed forms beside the code.

The residual expansion (every product of (1 + a) is a sum over gradient paths), in
integers and fractions (depthlab.probes.exactnum): a is read from its decimal text, so
-0.1 is -1/10, and the sum of C(N, k) a^k is exactly (1 + a)^N for every a, negative
ones included, where a float sum cancels catastrophically. Every exact figure goes to
JSON twice: its text (`*_text`, the digits the page and the CLI show) and its float.
The two norms on a small vector with every intermediate: mean, centred values,
variance and mean square exact (rationals rounded once to float64), the outputs over
float64 square roots, with the outputs of the vector scaled by 1000 and by 1/1000 beside
them, since eps makes scaling matter for small vectors. No torch, so `depthlab probe norms 3 4`
answers at once; tests/test_cli_startup.py checks the norms against the model's classes.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

from depthlab.config import ModelConfig
from depthlab.errors import UserError
from depthlab.probes.exactnum import parse_decimal, sqrt_text, text, to_float

MAX_PATH_DEPTH = 64
MAX_LISTED_PATHS = 16  # paths are listed one by one up to N = 4 (2^4 = 16)


@dataclass(frozen=True)
class PathGroup:
    layers_passed: int  # k: how many sublayers the path goes through
    n_paths: int  # C(N, k)
    value_each: Fraction  # a^k x0
    total: Fraction  # C(N, k) a^k x0

    def to_json(self) -> dict:
        return {"layers_passed": self.layers_passed,
                "n_paths": self.n_paths, "n_paths_text": text(self.n_paths),
                "value_each": to_float(self.value_each), "value_each_text": text(self.value_each),
                "total": to_float(self.total), "total_text": text(self.total)}


@dataclass(frozen=True)
class PathExpansion:
    """x_N = (1 + a)^N x_0 for F(x) = a x, expanded into 2^N paths grouped by k."""

    depth: int
    scale: Fraction
    x0: Fraction
    groups: tuple[PathGroup, ...]  # k = 0 (skip everything) ... k = N (the plain stack)
    paths: tuple[tuple[tuple[int, ...], Fraction], ...]  # (layers passed, value), small N only
    n_paths: int  # 2^N: one path per subset of the layers
    residual_output: Fraction  # the sum of all terms, (1 + a)^N x0
    plain_output: Fraction  # a^N x0: the only path a plain stack keeps
    jacobian_factor: Fraction  # dx_l/dx_{l-1} = 1 + a, the same for every layer (I + dF/dx)
    jacobian: Fraction  # the product: dx_N/dx_0 = (1 + a)^N
    plain_jacobian: Fraction  # a^N

    @property
    def jacobian_factors(self) -> tuple[Fraction, ...]:
        return (self.jacobian_factor,) * self.depth

    def to_json(self) -> dict:
        out: dict = {"kind": "paths", "depth": self.depth,
                     "groups": [g.to_json() for g in self.groups],
                     "paths": [{"layers": list(p), "value": to_float(v), "value_text": text(v)}
                               for p, v in self.paths],
                     "n_paths": self.n_paths, "n_paths_text": text(self.n_paths)}
        for name in ("scale", "x0", "residual_output", "plain_output", "jacobian_factor",
                     "jacobian", "plain_jacobian"):
            q = getattr(self, name)
            out[name] = to_float(q)
            out[name + "_text"] = text(q)
        out["jacobian_factors"] = [out["jacobian_factor"]] * self.depth
        return out


def residual_paths(depth: int = 2, scale: str | float | Fraction = "0.5",
                   x0: str | float | Fraction = 1) -> PathExpansion:
    """Expand prod_l (1 + a) x0 for N layers of F(x) = a x (the lesson: N = 2, a = 0.5 gives
    1 + 0.5 + 0.5 + 0.25 = 2.25; a plain stack keeps only 0.25). Veit et al. 2016 read
    a residual network as this ensemble of paths. Exact: a and x0 are read as the
    decimals they are written as (a float by its shortest repr)."""
    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= MAX_PATH_DEPTH:
        raise UserError(f"depth must be an integer between 1 and {MAX_PATH_DEPTH}, got {depth!r}")
    a = parse_decimal(scale, "scale")
    x = parse_decimal(x0, "x0")
    # Over the common denominator q^N x0.den, term k is the integer C(N,k) p^k q^(N-k) x0.num
    # (a = p/q): the sum is one integer sum, whatever the signs, and one division.
    p, q, n = a.numerator, a.denominator, depth
    scale_k = [a**k * x for k in range(n + 1)]  # a^k x0 (a Fraction's power needs no gcd)
    numerators = [math.comb(n, k) * p**k * q ** (n - k) * x.numerator for k in range(n + 1)]
    denominator = q**n * x.denominator
    groups = tuple(PathGroup(k, math.comb(n, k), scale_k[k], math.comb(n, k) * scale_k[k])
                   for k in range(n + 1))
    paths: tuple = ()
    if 2**n <= MAX_LISTED_PATHS:
        paths = tuple((layers, scale_k[len(layers)])
                      for k in range(n + 1)
                      for layers in combinations(range(1, n + 1), k))
    return PathExpansion(
        n, a, x, groups, paths,
        n_paths=sum(g.n_paths for g in groups),
        residual_output=Fraction(sum(numerators), denominator),
        plain_output=scale_k[n],
        jacobian_factor=1 + a,
        jacobian=Fraction((p + q) ** n, q**n),  # the chain rule's product (1 + a)^N
        plain_jacobian=Fraction(p**n, q**n),
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
    # Scale invariance, measured: per factor c, the largest change of each output when x
    # becomes c x. Zero but for eps, which stops mattering only once the variance (or
    # the mean square) is far above it: [3, 4] / 1000 changes LayerNorm's output by 0.84.
    scaled: tuple[ScaledNorms, ...] = ()

    def to_json(self) -> dict:
        out: dict = {"kind": "norms"}
        out.update({k: list(v) if isinstance(v, tuple) else v for k, v in vars(self).items()})
        out["scaled"] = [vars(s) for s in self.scaled]
        return out


@dataclass(frozen=True)
class ScaledNorms:
    factor: float
    layernorm_change: float | None  # max |LN(c x) - LN(x)|; None when c x leaves the floats
    rmsnorm_change: float | None


SCALE_FACTORS = (1000.0, 0.001)


MAX_FLOAT = Fraction(sys.float_info.max)


def sqrt_rational(q: Fraction) -> float:
    """sqrt(q) for a rational q >= 0, in float64: q is first scaled by 4^-k into [1, 4)
    and rounded once, its square root taken, and 2^k put back in one rounding (ldexp), so
    the square of 1e-170 (1e-340, below float64) still gives 1e-170. api.js's
    `sqrtRational` is the same steps."""
    if q == 0:
        return 0.0
    k = (q.numerator.bit_length() - q.denominator.bit_length()) // 2
    scaled = q / 4**k if k >= 0 else q * 4**-k
    return math.ldexp(math.sqrt(float(scaled)), k)


@dataclass(frozen=True)
class _Stats:
    """A vector's statistics as exact rationals (each float is a binary fraction, so its
    sum, mean and squares are too): rounded to float64 once, when shown."""

    mean: Fraction
    centred: tuple[Fraction, ...]
    variance: Fraction
    mean_square: Fraction

    @classmethod
    def of(cls, values: tuple[float, ...]) -> _Stats:
        xs = [Fraction(v) for v in values]
        mean = sum(xs, Fraction(0)) / len(xs)
        centred = tuple(x - mean for x in xs)
        return cls(mean, centred, sum((c * c for c in centred), Fraction(0)) / len(xs),
                   sum((x * x for x in xs), Fraction(0)) / len(xs))

    def normed(self, values: tuple[float, ...],
               eps: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """LayerNorm's and RMSNorm's outputs: each rounded centred value (or input) over
        the square root of the exact variance (or mean square) plus eps. Equal inputs
        centre to exactly 0, whatever eps."""
        ln = sqrt_rational(self.variance + Fraction(eps))
        rms = sqrt_rational(self.mean_square + Fraction(eps))
        return (tuple(float(c) / ln for c in self.centred), tuple(v / rms for v in values))


def _change(a: tuple[float, ...], b: tuple[float, ...]) -> float | None:
    d = max(abs(u - v) for u, v in zip(a, b, strict=True))
    return d if math.isfinite(d) else None


def compare_norms(x: list[float] | tuple[float, ...], eps: float = 1e-5) -> NormComparison:
    """The lesson's [3, 4]: RMS 3.536, RMSNorm [0.849, 1.131], LayerNorm about [-1, 1].
    Mean, centred values, variance and mean square are exact and rounded once; the
    outputs divide by float64 square roots."""
    values = tuple(float(v) for v in x)
    if not values or not all(math.isfinite(v) for v in values):
        raise UserError(f"need a non-empty vector of finite numbers, got {list(x)!r}")
    if not (math.isfinite(eps) and 0 < eps <= 1):
        raise UserError(f"eps must be in (0, 1], got {eps}")
    stats = _Stats.of(values)
    if stats.mean_square > MAX_FLOAT:  # the variance is never larger
        raise UserError(f"the squares of {list(x)!r} overflow float64: give numbers within "
                        "about ±1e150")
    layernorm, rmsnorm = stats.normed(values, eps)
    scaled = []
    for c in SCALE_FACTORS:
        big = tuple(c * v for v in values)
        other = _Stats.of(big) if all(math.isfinite(v) for v in big) else None
        if other is not None and other.mean_square <= MAX_FLOAT:
            ln, rn = other.normed(big, eps)
            scaled.append(ScaledNorms(c, _change(ln, layernorm), _change(rn, rmsnorm)))
        else:
            scaled.append(ScaledNorms(c, None, None))
    return NormComparison(
        x=values, eps=eps, mean=float(stats.mean), variance=float(stats.variance),
        mean_square=float(stats.mean_square), rms=sqrt_rational(stats.mean_square),
        centred=tuple(float(c) for c in stats.centred), layernorm=layernorm, rmsnorm=rmsnorm,
        scaled=tuple(scaled),
    )


def residual_init_std(n_layers: int, base: float = 0.02) -> float:
    """Std of the output projections: base / sqrt(2L), since L blocks make 2L writes
    (GPT-2, Radford et al. 2019). The course model: 0.02 / sqrt(8) = 0.00707."""
    if not isinstance(n_layers, int) or n_layers < 1:
        raise UserError(f"n_layers must be an integer >= 1, got {n_layers!r}")
    return ModelConfig(n_layers=n_layers, init_std=base).out_proj_std


def init_scale_text(init_std: float, n_writes: int) -> tuple[str, str]:
    """The depth-scaled init std init_std / sqrt(n_writes) as (rule, value): the rule as
    written ("0.02/√8") and the value from integers, exact or correctly rounded to 6
    significant digits ("~0.00707107"; 0.02/√4 is exactly "0.01")."""
    if not isinstance(n_writes, int) or n_writes < 1:
        raise UserError(f"n_writes must be an integer >= 1, got {n_writes!r}")
    std = parse_decimal(init_std, "init_std")
    return f"{text(std)}/√{n_writes}", sqrt_text(std * std / n_writes)
