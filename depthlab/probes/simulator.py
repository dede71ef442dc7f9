"""The lesson's simulator: N random sublayers stacked plain or with the three toggles.

Two sublayer forms, weights ~ normal(0, g^2 / fan_in), 6 tokens of width 16, float64:

* gradient mode, F(x) = tanh(x W1) W2: for small activations the Jacobian has gain
  about g^2 per sublayer (two matrices of gain g), so a plain stack scales the gradient
  by roughly g^(2N); at large g tanh saturates and caps the growth (the knife edge).
* collapse mode, single-head causal attention, F(X) = softmax(Q K^T / sqrt(d)) V with
  random Q, K, V projections: every output row is a weighted average of earlier rows,
  which drives the tokens to one vector at a doubly exponential rate (Dong et al. 2021).
  `ffn=True` puts the tanh sublayer after every attention sublayer (2N sublayers).
  Causal averaging of 6 tokens contracts the spread by 1/2 per layer once the pattern
  is flat (the second eigenvalue of the uniform causal average), the lesson's rate.

The improved stack applies any of: residual x + F(x) (He et al. 2016), RMSNorm on the
sublayer input (Pre-Norm, Xiong et al. 2020) and a write-back times 1/sqrt(N).
Weights are drawn from one generator seeded by (seed, N), then multiplied by g, so the
same request always gives the same numbers and a sweep over g is a smooth curve.
Every function takes a leading "gain" batch dimension so a sweep is one pass.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

import torch

from depthlab.errors import UserError
from depthlab.probes.jsonsafe import json_list, json_number

DTYPE = torch.float64  # ratios reach 1e-20; float32 would round them to noise
MAX_DEPTH = 256  # the CLI's bound; the page's slider stops at PAGE_MAX_DEPTH
PAGE_MAX_DEPTH = 64
MAX_GAIN = 10.0
SWEEP_GAINS = tuple(round(0.5 + 0.05 * i, 2) for i in range(31))  # 0.50, 0.55, ..., 2.00


def _check(name: str, ok: bool, allowed: str, value: object) -> None:
    if not ok:
        raise UserError(f"{name} must be {allowed}, got {value!r}")


@dataclass(frozen=True)
class StackRequest:
    """One simulator stack. The toggles describe the improved row; all False is the plain row."""

    depth: int = 32  # N sublayers (attention sublayers in collapse mode)
    gain: float = 1.0  # g: weights ~ normal(0, g^2 / fan_in)
    residual: bool = False
    prenorm: bool = False
    scale_writes: bool = False  # write-back times 1/sqrt(N)
    ffn: bool = False  # collapse mode only: a tanh FFN after every attention sublayer
    seed: int = 0
    tokens: int = 6
    width: int = 16  # small, like the page's simulator; 64+ smooths seed-to-seed spread

    def __post_init__(self) -> None:
        _check("depth", isinstance(self.depth, int) and 1 <= self.depth <= MAX_DEPTH,
               f"an integer between 1 and {MAX_DEPTH}", self.depth)
        _check("gain", isinstance(self.gain, (int, float)) and math.isfinite(self.gain)
               and 0 < self.gain <= MAX_GAIN, f"a number in (0, {MAX_GAIN}]", self.gain)
        _check("seed", isinstance(self.seed, int) and 0 <= self.seed < 2**31,
               "an integer >= 0", self.seed)
        _check("tokens", isinstance(self.tokens, int) and 2 <= self.tokens <= 256,
               "an integer between 2 and 256", self.tokens)
        _check("width", isinstance(self.width, int) and 2 <= self.width <= 1024,
               "an integer between 2 and 1024", self.width)

    def plain(self) -> StackRequest:
        """The naive stack x <- F(x) with the same N, g, seed and sizes."""
        return replace(self, residual=False, prenorm=False, scale_writes=False)

    @property
    def toggles(self) -> str:
        on = [n for n in ("residual", "prenorm", "scale_writes") if getattr(self, n)]
        return "+".join(on) or "plain"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GradResult:
    """Gradient reach: norms of dLoss/d(input of sublayer l), bottom (l = 0) first."""

    request: StackRequest
    grad_norm: tuple[float, ...]  # absolute, per sublayer input, bottom first
    per_layer: tuple[float, ...]  # grad_norm / grad_norm[top]; the top one is 1
    ratio: float  # bottom / top = per_layer[0]
    stream_rms: tuple[float, ...]  # RMS of the stream: index 0 = input, k = after write k

    def to_json(self) -> dict:
        return {"kind": "gradflow", "request": self.request.to_json(), "ratio": json_number(self.ratio),
                "per_layer": json_list(self.per_layer), "grad_norm": json_list(self.grad_norm),
                "stream_rms": json_list(self.stream_rms)}


@dataclass(frozen=True)
class SweepResult:
    """Bottom/top ratio over g for the plain row and the improved row (the request's toggles)."""

    request: StackRequest  # its gain is ignored
    gains: tuple[float, ...]
    ratios: tuple[float, ...]  # improved row
    plain_ratios: tuple[float, ...]

    def to_json(self) -> dict:
        return {"kind": "sweep", "request": self.request.to_json(), "gains": list(self.gains),
                "ratios": json_list(self.ratios), "plain_ratios": json_list(self.plain_ratios)}


@dataclass(frozen=True)
class CollapseResult:
    """Token collapse per layer, index 0 = input, k = after attention sublayer k."""

    request: StackRequest
    rel_distance: tuple[float, ...]  # ||X - 1 mean(X)^T||_F / ||X||_F (Dong et al. 2021)
    mean_cosine: tuple[float, ...]  # mean cosine over all pairs of distinct tokens
    stream_rms: tuple[float, ...]

    def to_json(self) -> dict:
        return {"kind": "collapse", "request": self.request.to_json(),
                "rel_distance": json_list(self.rel_distance), "mean_cosine": json_list(self.mean_cosine),
                "stream_rms": json_list(self.stream_rms)}


# ---- the shared pieces -----------------------------------------------------------------

def _generator(seed: int, depth: int, mode: str) -> torch.Generator:
    # Seeded by (seed, N, mode): changing N regenerates the whole set of weights.
    return torch.Generator().manual_seed(seed * 1_000_003 + depth * 1009 + {"grad": 1, "attn": 2}[mode])


def _inputs(req: StackRequest) -> torch.Tensor:
    """The tokens [T, d]: unit-variance random vectors, from the seed alone."""
    gen = torch.Generator().manual_seed(req.seed)
    return torch.randn(req.tokens, req.width, generator=gen, dtype=DTYPE)


def _unit_weights(gen: torch.Generator, n: int, width: int) -> torch.Tensor:
    """n matrices [n, d, d] ~ normal(0, 1 / fan_in); callers multiply by g."""
    return torch.randn(n, width, width, generator=gen, dtype=DTYPE) / math.sqrt(width)


def rms_normalize(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """RMSNorm without a learned scale (gamma is 1 at init): x / RMS(x) per token."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _rms(x: torch.Tensor) -> torch.Tensor:
    """RMS over all tokens and features, per gain: [G, T, d] -> [G]."""
    return x.pow(2).mean(dim=(-2, -1)).sqrt()


def _tanh_sublayer(h: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.tanh(h @ w1) @ w2


def _attention_sublayer(h: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor,
                        wv: torch.Tensor) -> torch.Tensor:
    T, d = h.shape[-2], h.shape[-1]
    scores = (h @ wq) @ (h @ wk).transpose(-2, -1) / math.sqrt(d)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    pattern = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    return pattern @ (h @ wv)  # each token: a weighted average of itself and earlier tokens


def _write(x: torch.Tensor, f: torch.Tensor, req: StackRequest, n_writes: int) -> torch.Tensor:
    if req.scale_writes:
        f = f / math.sqrt(n_writes)
    return x + f if req.residual else f


# ---- gradient reach ----------------------------------------------------------------------

def _gradient_batch(req: StackRequest, gains: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient norms [G, N] at each sublayer input and stream RMS [G, N + 1], for G gains."""
    gen = _generator(req.seed, req.depth, "grad")
    w = _unit_weights(gen, 2 * req.depth, req.width)
    readout = torch.randn(req.tokens, req.width, generator=gen, dtype=DTYPE)
    g = gains.to(DTYPE).view(-1, 1, 1)
    x = _inputs(req).expand(len(gains), -1, -1)
    inputs, rms = [], [_rms(x)]
    with torch.enable_grad():
        for layer in range(req.depth):
            x = x.detach().requires_grad_() if layer == 0 else x
            x.retain_grad()
            inputs.append(x)
            h = rms_normalize(x) if req.prenorm else x
            f = _tanh_sublayer(h, g * w[2 * layer], g * w[2 * layer + 1])
            x = _write(x, f, req, req.depth)
            rms.append(_rms(x))
        # Loss: a fixed random readout of the top's output, so only depth shapes the gradient.
        (x * readout).sum().backward()
    norms = torch.stack([t.grad.pow(2).sum(dim=(-2, -1)).sqrt() for t in inputs], dim=1)
    return norms, torch.stack([r.detach() for r in rms], dim=1)


@lru_cache(maxsize=512)
def gradient_reach(req: StackRequest) -> GradResult:
    """Does the gradient reach the bottom? One stack, the toggles of `req`."""
    norms, rms = _gradient_batch(req, torch.tensor([float(req.gain)]))
    norms, rms = norms[0], rms[0]
    per_layer = norms / norms[-1]
    return GradResult(req, tuple(norms.tolist()), tuple(per_layer.tolist()),
                      float(per_layer[0]), tuple(rms.tolist()))


@lru_cache(maxsize=64)
def gain_sweep(req: StackRequest, gains: tuple[float, ...] = SWEEP_GAINS) -> SweepResult:
    """Bottom/top ratio over g (default 31 gains in [0.5, 2.0]), plain and improved rows,
    each computed as one batched pass over all gains."""
    for value in gains:
        replace(req, gain=value)  # validates each gain
    g = torch.tensor(gains, dtype=DTYPE)
    improved, _ = _gradient_batch(req, g)
    plain, _ = _gradient_batch(req.plain(), g)
    ratio = lambda n: tuple((n[:, 0] / n[:, -1]).tolist())
    return SweepResult(req, tuple(gains), ratio(improved), ratio(plain))


# ---- token collapse ------------------------------------------------------------------------

def rel_distance(x: torch.Tensor) -> torch.Tensor:
    """||X - 1 mean(X)^T||_F / ||X||_F over the token axis: 0 when all tokens are identical."""
    centred = x - x.mean(dim=-2, keepdim=True)
    return centred.pow(2).sum(dim=(-2, -1)).sqrt() / x.pow(2).sum(dim=(-2, -1)).sqrt()


def mean_cosine(x: torch.Tensor) -> torch.Tensor:
    """Mean cosine similarity over all pairs of distinct tokens."""
    u = x / x.norm(dim=-1, keepdim=True)
    sims = u @ u.transpose(-2, -1)
    T = x.shape[-2]
    return (sims.sum(dim=(-2, -1)) - T) / (T * (T - 1))


@lru_cache(maxsize=512)
def token_collapse(req: StackRequest) -> CollapseResult:
    """Do the tokens become the same vector? Attention-only (or attention + FFN) stack."""
    gen = _generator(req.seed, req.depth, "attn")
    per_layer = 5 if req.ffn else 3
    w = req.gain * _unit_weights(gen, per_layer * req.depth, req.width)
    n_writes = req.depth * (2 if req.ffn else 1)
    x = _inputs(req)
    states = [x]
    with torch.no_grad():
        for layer in range(req.depth):
            wq, wk, wv, *ffn = w[per_layer * layer: per_layer * (layer + 1)]
            h = rms_normalize(x) if req.prenorm else x
            x = _write(x, _attention_sublayer(h, wq, wk, wv), req, n_writes)
            if ffn:
                h = rms_normalize(x) if req.prenorm else x
                x = _write(x, _tanh_sublayer(h, *ffn), req, n_writes)
            states.append(x)
    stack = torch.stack(states)
    return CollapseResult(req, tuple(rel_distance(stack).tolist()),
                          tuple(mean_cosine(stack).tolist()),
                          tuple(stack.pow(2).mean(dim=(-2, -1)).sqrt().tolist()))
