"""The lesson's simulator: N random sublayers, stacked naively or wired like the model.

Two sublayer forms, weights ~ normal(0, g^2 / fan_in), 6 tokens of width 16, float64:

* gradient mode, F(x) = tanh(x W1) W2: for small activations the Jacobian has gain
  about g^2 per sublayer (two matrices of gain g), so a naive stack scales the gradient
  by roughly g^(2N); at large g tanh saturates and caps the growth (the knife edge).
* collapse mode, single-head causal attention, F(X) = softmax(Q K^T / sqrt(d)) V with
  random Q, K, V projections: every output row is a weighted average of earlier rows,
  which drives the tokens to one vector at a doubly exponential rate (Dong et al. 2021).
  `ffn=True` puts the tanh sublayer after every attention sublayer (2N sublayers).
  Causal averaging of 6 tokens contracts the spread by 1/2 per layer once the pattern
  is flat (the second eigenvalue of the uniform causal average), the lesson's rate.
  `mixer` swaps that sublayer for a random Gated DeltaNet one (below), or `hybrid` makes
  every 4th layer attention and the other three DeltaNet, as the lesson's anchor does.
  Gradient mode has no token mixer (its sublayer acts on each token alone).

The Gated DeltaNet sublayer is the model's rule with one head of width d and no conv,
gated norm or out_proj: q = L2(h Wq) / sqrt(d), k = L2(h Wk), v = h Wv with the same
Wq, Wk, Wv the attention sublayer of that layer would use (so the switch changes only how
tokens are mixed), and per token the model's decay and write strength,
g_t = -A softplus(h_t . w_a + 1) and beta_t = sigmoid(h_t . w_b), with w_a, w_b ~
normal(0, g^2 / d) and A ~ uniform(0.01, 16), the init of `GatedDeltaNet.A_log` (dt_bias
= 1). These come from a second generator seeded by (seed, N), so the attention rows'
numbers do not move. The output is depthlab.model.deltanet's own
`chunked_gated_delta_rule` in float64, from a zero state.

With `x0_mix`, the stream starts at the input normalised to RMS 1 (x0) and every layer's
input is resid_l * x + x0_l * x0 with the model's init (1.15 -> 1.05, 0.20 -> 0.05 over
the depth; depthlab.model.shortcuts), once per layer as the model mixes once per block.

The improved stack is wired with the model's own switches and modules, so there is one
write rule, the one of `Block.forward`:

    h = residual.read(x); h = norm(h); x = residual(x, residual.scale(F(h)))

`residual` is any entry of the model's registry (depthlab.model.residual), `norm` is
`none` or the model's RMSNorm (scale 1, eps 1e-12) in that residual's norm slot (none
only for a residual that keeps the stream on the sphere itself: nGPT's update, whose
write enters as Norm(F(h)), so the toy sublayer's scale drops out as in the model): on the
sublayer input (Pre-Norm, Xiong et al. 2020), or after the add for a residual the model
allows only with placement=post (deepnorm: x <- RMSNorm(alpha x + F(x)), as `Block`
applies its post-norm). A residual's own init rule (`Residual.init_scale`, deepnorm's
beta on v and the FFN matrices) multiplies the toy sublayer's weights of the same role:
W1, W2 of the tanh sublayer are the FFN's up/down projections, the attention's are q, k, v.
The write scale is `ModelConfig.write_scale` of a toy config whose n_writes is the number
of writes in the toy stack: 1/sqrt(N) for residual=scaled (1/sqrt(2N) with ffn=True).
The naive stack is residual=none, norm=none: x <- F(x).

A residual that widens the stream (open: [.., T, D] -> [.., T, n, D], close: back; hc
and mhc with SIM_STREAMS copies, attnres with its growing history of writes) works as
its module does. Stream RMS and collapse are measured on close(stream), the read-out
the final norm would see, as the model's probes do (depthlab.probes.stream). The gradient
norm at a wide stream is the root mean square over its copies (or history entries) of
each one's norm (the model's probe takes the norm over all entries): the norm itself for
one stream, and plain's norm for attnres at init, whose history grows by one entry per
write and whose every entry then carries plain's gradient.

Weights are drawn from one generator seeded by (seed, N), then multiplied by g, so the
same request always gives the same numbers and a sweep over g is a smooth curve.
Every function takes a leading "gain" batch dimension so a sweep is one pass.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

import torch

from depthlab.config import DELTANET_REFUSES_RESIDUAL, ModelConfig
from depthlab.errors import UserError
from depthlab.model.deltanet import chunked_gated_delta_rule, l2_normalize
from depthlab.model.norms import make_norm
from depthlab.model.residual import RESIDUAL_BUILDERS, Residual
from depthlab.model.shortcuts import x0_mix_init
from depthlab.model.transformer import resets_itself
from depthlab.probes.jsonsafe import json_list, json_number
from depthlab.probes.simulator_bounds import (
    HYBRID,
    HYBRID_KINDS,
    MAX_DEPTH,
    MAX_GAIN,
    NORMS,
    SIM_MIXERS,
    SIM_STREAMS,
    SWEEP_GAINS,
)
from depthlab.variants import RESIDUAL_SPECS, keys_where

DTYPE = torch.float64  # ratios reach 1e-20; float32 would round them to noise
NORM_EPS = 1e-12  # RMSNorm's eps here: the toy tokens have RMS ~1, far from any eps


def _check(name: str, ok: bool, allowed: str, value: object) -> None:
    if not ok:
        got = json.dumps(value) if isinstance(value, bool) else repr(value)  # true, as typed
        raise UserError(f"{name} must be {allowed}, got {got}")


@dataclass(frozen=True)
class ToyConfig(ModelConfig):
    """A ModelConfig whose n_writes is the toy stack's own count (N, or 2N with FFNs),
    so `write_scale` and every builder of the registry read the toy stack's depth
    (n_layers = ceil(writes / 2): two writes make a layer, as in the model)."""

    writes: int = 2

    @property
    def n_writes(self) -> int:
        return self.writes


@dataclass(frozen=True)
class StackRequest:
    """One simulator stack in the model's vocabulary. residual=none, norm=none is the naive row."""

    depth: int = 32  # N sublayers (attention sublayers in collapse mode)
    gain: float = 1.0  # g: weights ~ normal(0, g^2 / fan_in)
    residual: str = "none"  # a name of depthlab.model.residual's registry
    norm: str = "none"  # none | rmsnorm on each sublayer's input
    ffn: bool = False  # collapse mode only: a tanh FFN after every attention sublayer
    x0_mix: bool = False  # before every layer x <- resid_l x + x0_l x0 (model.x0_mix)
    mixer: str = "attention"  # collapse mode's token mixer: a MIXER_SPECS key or hybrid
    seed: int = 0
    tokens: int = 6
    width: int = 16  # small, like the page's simulator; 64+ smooths seed-to-seed spread

    def __post_init__(self) -> None:
        _check("depth", isinstance(self.depth, int) and 1 <= self.depth <= MAX_DEPTH,
               f"an integer between 1 and {MAX_DEPTH}", self.depth)
        _check("gain", isinstance(self.gain, (int, float)) and math.isfinite(self.gain)
               and 0 < self.gain <= MAX_GAIN, f"a number in (0, {MAX_GAIN}]", self.gain)
        # the spec table read now, so an entry added at run time is a choice at once
        _check("residual", self.residual in RESIDUAL_SPECS, "one of " + ", ".join(RESIDUAL_SPECS),
               self.residual)
        spec = RESIDUAL_SPECS[self.residual]
        _check("norm", self.norm in NORMS, "one of " + ", ".join(NORMS), self.norm)
        _check("x0_mix", isinstance(self.x0_mix, bool), "true or false", self.x0_mix)
        _check("x0_mix", not self.x0_mix or spec.takes_x0_mix,
               f"false with residual={self.residual} (the mix needs one stream, neither widened "
               "nor kept on the unit sphere: residual "
               + ", ".join(keys_where(lambda s: s.takes_x0_mix)) + ")", self.x0_mix)
        _check("norm", self.norm == "none" or not spec.needs_no_norm,
               f"none with residual={self.residual} (it keeps the stream on the unit sphere "
               "itself, with no norm layer)", self.norm)
        _check("mixer", self.mixer in SIM_MIXERS, "one of " + ", ".join(SIM_MIXERS), self.mixer)
        if self.mixer != "attention":  # the model's own refusals (depthlab.config)
            why = next((why for applies, why in DELTANET_REFUSES_RESIDUAL if applies(spec)), None)
            _check("mixer", why is None, f"attention with residual={self.residual} (it {why})",
                   self.mixer)
        _check("seed", isinstance(self.seed, int) and 0 <= self.seed < 2**31,
               "an integer >= 0", self.seed)
        _check("tokens", isinstance(self.tokens, int) and 2 <= self.tokens <= 256,
               "an integer between 2 and 256", self.tokens)
        _check("width", isinstance(self.width, int) and 2 <= self.width <= 1024,
               "an integer between 2 and 1024", self.width)

    def layer_kind(self, layer: int) -> str:
        """The token mixer of collapse-mode layer `layer`: a MIXER_SPECS key."""
        return HYBRID_KINDS[layer % len(HYBRID_KINDS)] if self.mixer == HYBRID else self.mixer

    def naive(self) -> StackRequest:
        """The naive stack x <- F(x) with the same N, g, seed and sizes."""
        return replace(self, residual="none", norm="none", x0_mix=False)

    @property
    def writes(self) -> int:
        """Writes into the stream: one per sublayer (two per layer with FFNs)."""
        return self.depth * (2 if self.ffn else 1)

    def config(self) -> ToyConfig:
        """The model's switches for this stack (its n_writes = the toy stack's writes; the
        norm in the residual's slot; SIM_STREAMS copies for a widening residual)."""
        spec = RESIDUAL_SPECS[self.residual]
        wide = {"streams": SIM_STREAMS} if spec.widens_copies else {}
        return ToyConfig(n_layers=max(1, math.ceil(self.writes / 2)), d_model=self.width,
                         n_heads=1, norm=self.norm, norm_eps=NORM_EPS, residual=self.residual,
                         placement=spec.norm_slot, writes=self.writes, **wide)

    @property
    def label(self) -> str:
        """The switches that differ from the naive stack, e.g. "plain+rmsnorm"; "naive" if none."""
        on = [v for v in (self.residual, self.norm) if v != "none"]
        return "+".join(on + (["x0"] if self.x0_mix else [])) or "naive"

    def to_json(self) -> dict:
        return asdict(self) | {"write_scale": self.config().write_scale}


def _row(result: object, fields: tuple[str, ...]) -> dict:
    return {name: json_list(getattr(result, name)) for name in fields} | {
        "trail": result.trail.to_json()}


# ---- one token's first writes, head to tail --------------------------------------------

TRAIL_WRITES = 6  # the writes the page draws as arrows: enough to see the pattern
TRAIL_TOKEN = -1  # the last token: in collapse mode the only one that attends to all


@dataclass(frozen=True)
class Trail:
    """One token through the first writes of a stack, at full width: the stream's read-out
    after each write (states[0] = the input) and each write as it entered the residual.

    `rule` is how the states follow from the writes, measured, not assumed from a name:
    "replace" (s_k = w_k, x <- F(x)), "add" (s_k = s_{k-1} + w_k, x <- x + F(x), drawn
    head to tail) or "other" (the residual also rescales, normalises or mixes the stream:
    DeepNorm's alpha x, a norm after the add, HC's copies). The page's picture is these
    vectors in one plane: the plane through the origin that keeps the most of them
    (uncentred PCA, each vector scaled to length 1 first so that a vanishing one counts as
    much as a long one), a linear map, so a sum of writes stays a sum of arrows. A fixed
    random plane would keep about 2/width of each vector (1/8 at width 16)."""

    token: int  # its index among the stack's tokens
    states: tuple[tuple[float, ...], ...]  # K + 1 vectors of width D
    writes: tuple[tuple[float, ...], ...]  # K vectors of width D

    @staticmethod
    def of(states: list[torch.Tensor], writes: list[torch.Tensor], token: int) -> Trail:
        """From the loop's read-outs [T, D] and writes [T, D] (the first K + 1 and K)."""
        pick = lambda ts: tuple(tuple(t[token].tolist()) for t in ts)
        return Trail(token, pick(states), pick(writes))

    def _tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tensor(self.states, dtype=DTYPE), torch.tensor(self.writes, dtype=DTYPE)

    @property
    def rule(self) -> str:
        s, w = self._tensors()
        tol = 1e-9 * float(s.norm(dim=1).max())  # float64 rounding is ~1e-16 of that
        if float((s[1:] - w).norm(dim=1).max()) <= tol:
            return "replace"
        if float((s[1:] - s[:-1] - w).norm(dim=1).max()) <= tol:
            return "add"
        return "other"

    def plane(self) -> tuple[torch.Tensor, float]:
        """The basis [2, D] of the picture's plane and the share it keeps: the mean over the
        drawn vectors (states and non-zero writes) of |projection|^2 / |vector|^2."""
        s, w = self._tensors()
        rows = torch.cat([s, w])
        lengths = rows.norm(dim=1)
        unit = rows[lengths > 0] / lengths[lengths > 0, None]
        # full: a second axis even when every drawn vector is on one line (a gain so small
        # that every write underflows leaves the input alone)
        basis = torch.linalg.svd(unit, full_matrices=True).Vh[:2].clone()
        if float(s[0] @ basis[0]) < 0:  # signs fixed: the input points right ...
            basis[0] = -basis[0]
        y = unit @ basis[1]
        first = int((y.abs() > 1e-12).nonzero()[0]) if bool((y.abs() > 1e-12).any()) else 0
        if float(y[first]) < 0:  # ... and the first vector off that axis points up
            basis[1] = -basis[1]
        return basis, float((unit @ basis.T).pow(2).sum() / len(unit))

    def reading(self, rule: str) -> str:
        """The picture's line: the key of its sentence in the page's text table, which the
        page fills with this trail's numbers (x0's length, the last state's, the mean write's)."""
        if rule == "add" and not any(any(v) for v in self.writes):
            return "read.trail.still"  # nothing written: ReZero at init
        return "read.trail." + rule

    def to_json(self) -> dict:
        s, w = self._tensors()
        basis, kept = self.plane()
        rule = self.rule
        lengths = w.norm(dim=1)
        out = {"token": self.token, "rule": rule, "kept": kept,
               "xy": json_list((s @ basis.T).flatten().tolist()),
               "len": json_list(s.norm(dim=1).tolist()), "wlen": json_list(lengths.tolist()),
               "wmean": json_number(float(lengths.mean())), "reading": self.reading(rule)}
        if rule == "other":  # the writes are not the steps: drawn from each tip on their own
            out["wxy"] = json_list((w @ basis.T).flatten().tolist())
        return out


@dataclass(frozen=True)
class GradResult:
    """Gradient reach: norms of dLoss/d(input of sublayer l), bottom (l = 0) first."""

    request: StackRequest
    grad_norm: tuple[float, ...]  # absolute, per sublayer input, bottom first
    per_layer: tuple[float, ...]  # grad_norm / grad_norm[top]; the top one is 1
    ratio: float  # bottom / top = per_layer[0]
    stream_rms: tuple[float, ...]  # RMS of the stream: index 0 = input, k = after write k
    trail: Trail  # the last token through the first writes

    def row(self) -> dict:
        return {"ratio": json_number(self.ratio)} | _row(self, ("per_layer", "grad_norm",
                                                                 "stream_rms"))


@dataclass(frozen=True)
class CollapseResult:
    """Token collapse per layer, index 0 = input, k = after attention sublayer k."""

    request: StackRequest
    rel_distance: tuple[float, ...]  # ||X - 1 mean(X)^T||_F / ||X||_F (Dong et al. 2021)
    mean_cosine: tuple[float, ...]  # mean cosine over all pairs of distinct tokens
    stream_rms: tuple[float, ...]
    trail: Trail  # the last token through the first writes

    def row(self) -> dict:
        return _row(self, ("rel_distance", "mean_cosine", "stream_rms"))


@dataclass(frozen=True)
class Comparison:
    """The naive and the improved stack for one request: the one JSON shape of a simulator
    result, printed by `depthlab probe gradflow|collapse --json` and sent by /api/simulate."""

    kind: str  # gradient | collapse
    naive: GradResult | CollapseResult
    improved: GradResult | CollapseResult

    def to_json(self) -> dict:
        return {"kind": self.kind, "request": self.improved.request.to_json(),
                "naive": self.naive.row(), "improved": self.improved.row()}


@dataclass(frozen=True)
class SweepResult:
    """Bottom/top ratio over g for the naive row and the improved row (the request's switches);
    the JSON shape of `probe gradflow --sweep --json` and /api/sweep."""

    request: StackRequest  # its gain is ignored
    gains: tuple[float, ...]
    ratios: tuple[float, ...]  # improved row
    naive_ratios: tuple[float, ...]

    def to_json(self) -> dict:
        return {"kind": "sweep", "request": self.request.to_json(), "gains": list(self.gains),
                "naive": json_list(self.naive_ratios), "improved": json_list(self.ratios)}


# ---- the shared pieces -----------------------------------------------------------------

def _generator(seed: int, depth: int, mode: str) -> torch.Generator:
    # Seeded by (seed, N, mode): changing N regenerates the whole set of weights.
    modes = {"grad": 1, "attn": 2, "delta": 3}  # delta: the DeltaNet sublayers' own draws
    return torch.Generator().manual_seed(seed * 1_000_003 + depth * 1009 + modes[mode])


def _inputs(req: StackRequest) -> torch.Tensor:
    """The tokens [T, d]: unit-variance random vectors, from the seed alone."""
    gen = torch.Generator().manual_seed(req.seed)
    return torch.randn(req.tokens, req.width, generator=gen, dtype=DTYPE)


def _unit_weights(gen: torch.Generator, n: int, width: int) -> torch.Tensor:
    """n matrices [n, d, d] ~ normal(0, 1 / fan_in); callers multiply by g."""
    return torch.randn(n, width, width, generator=gen, dtype=DTYPE) / math.sqrt(width)


def _rms(x: torch.Tensor) -> torch.Tensor:
    """RMS over every element after the leading gain dimension: [G, ...] -> [G]."""
    return x.flatten(1).pow(2).mean(dim=1).sqrt()


def _grad_norm(stream: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """[G] gradient norms at one stream [G, T, D] or [G, T, n, D]: the norm over every
    element, divided by sqrt(n) for n copies (the RMS over copies of each copy's norm)."""
    copies = stream.shape[-2] if stream.ndim == 4 else 1
    return (grad.flatten(1).pow(2).sum(dim=1) / copies).sqrt()


def _tanh_sublayer(h: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.tanh(h @ w1) @ w2


_tanh_sublayer.projections = ("up_proj", "down_proj")  # the roles of W1, W2 in the model's FFN


def _attention_sublayer(h: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor,
                        wv: torch.Tensor) -> torch.Tensor:
    T, d = h.shape[-2], h.shape[-1]
    scores = (h @ wq) @ (h @ wk).transpose(-2, -1) / math.sqrt(d)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    pattern = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    return pattern @ (h @ wv)  # each token: a weighted average of itself and earlier tokens


_attention_sublayer.projections = ("q_proj", "k_proj", "v_proj")

A_RANGE = (0.01, 16.0)  # GatedDeltaNet.reset_parameters: A ~ uniform(0.01, 16), dt_bias = 1


def _deltanet_sublayer(h: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor,
                       wa: torch.Tensor, wb: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """One head of the model's gated delta rule over the tokens of h [..., T, d]: the
    module docstring's rule, through depthlab.model.deltanet's chunked form."""
    T, d = h.shape[-2], h.shape[-1]
    flat = h.reshape(-1, T, d)  # [B, T, d], one head: [B, 1, T, *]
    q = (l2_normalize(flat @ wq) / math.sqrt(d))[:, None]
    k = l2_normalize(flat @ wk)[:, None]
    v = (flat @ wv)[:, None]
    g = (-A * torch.nn.functional.softplus(flat @ wa + 1.0))[:, None]  # log decay, <= 0
    beta = torch.sigmoid(flat @ wb)[:, None]
    out, _ = chunked_gated_delta_rule(q, k, v, g, beta)
    return out[:, 0].reshape(h.shape)


_deltanet_sublayer.projections = ("q_proj", "k_proj", "v_proj", "in_proj_a", "in_proj_b", "A_log")
MIXER_SUBLAYERS = {"attention": _attention_sublayer, "gated_deltanet": _deltanet_sublayer}


def deltanet_weights(req: StackRequest) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(w_a [d], w_b [d], A []) for each layer of a collapse stack, from their own generator
    seeded by (seed, N); w_a, w_b times the gain, A from the model's init."""
    gen = _generator(req.seed, req.depth, "delta")
    out = []
    for _ in range(req.depth):
        wa, wb = (req.gain * torch.randn(2, req.width, generator=gen, dtype=DTYPE)
                  / math.sqrt(req.width))
        lo, hi = A_RANGE
        A = lo + (hi - lo) * torch.rand((), generator=gen, dtype=DTYPE)
        out.append((wa, wb, A))
    return out


class Wiring:
    """The model's modules for each write of a toy stack: one residual module per write (as
    `Block` holds one per sublayer) and the norm in its slot (input, or after the add for a
    Post-LN residual), built from the stack's config. Nothing trains them, so one set
    serves every request with that config (`wiring`)."""

    def __init__(self, cfg: ToyConfig) -> None:
        with torch.random.fork_rng(devices=[]):  # a residual with random init: fixed, and
            torch.manual_seed(0)                 # the caller's generator left untouched
            self.residuals = [self._residual(cfg, k) for k in range(cfg.n_writes)]
        norm = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps)
        self.norm = None if norm is None else norm.to(DTYPE).requires_grad_(False)
        self.post = cfg.placement == "post"

    @staticmethod
    def _residual(cfg: ToyConfig, k: int) -> Residual:
        module = RESIDUAL_BUILDERS[cfg.residual](cfg).to(DTYPE)
        module.write_index = k  # as the Transformer numbers its writes (HC's init reads it)
        for part in module.modules():  # the model's init_weights does the same
            if resets_itself(part):
                part.reset_parameters()
        return module.requires_grad_(False)  # only the stream's gradient is measured

    def open(self, x: torch.Tensor) -> torch.Tensor:
        return self.residuals[0].open(x)

    def mix(self, layer: int, depth: int, x: torch.Tensor, x0: torch.Tensor | None) -> torch.Tensor:
        """model.x0_mix before layer `layer` of `depth`: resid * x + x0 * x0 with the
        model's init (depthlab.model.shortcuts.x0_mix_init); x itself when x0 is None."""
        if x0 is None:
            return x
        resid, embed = x0_mix_init(layer, depth)
        return resid * x + embed * x0

    def close(self, stream: torch.Tensor) -> torch.Tensor:
        return self.residuals[-1].close(stream)

    def write(self, k: int, stream: torch.Tensor, sublayer, *weights: torch.Tensor,
              record: list | None = None) -> torch.Tensor:
        """Write k, sublayer(h, *weights): the rule of `Block.forward`, with the model's
        residual and norm modules and the residual's init rule on the weights. `record`,
        if given, receives the write as it enters the residual (the model's *_write hook)."""
        residual = self.residuals[k]
        scales = [residual.init_scale(name) for name in sublayer.projections]
        weights = [w if s == 1.0 else w * s for w, s in zip(weights, scales, strict=True)]
        h = residual.read(stream)
        if self.norm is not None and not self.post:
            h = self.norm(h)
        write = residual.scale(sublayer(h, *weights))
        if record is not None:
            record.append(write.detach())
        stream = residual(stream, write)
        return self.norm(stream) if self.norm is not None and self.post else stream


@lru_cache(maxsize=64)
def wiring(cfg: ToyConfig) -> Wiring:
    return Wiring(cfg)


def _x0(x: torch.Tensor) -> torch.Tensor:
    """model.x0_mix's x0: each token's input vector normalised to RMS 1 (no scale, no eps
    worth the name: the toy tokens have RMS ~1)."""
    return x * x.pow(2).mean(dim=-1, keepdim=True).add(NORM_EPS).rsqrt()


# ---- gradient reach ----------------------------------------------------------------------

def _gradient_batch(req: StackRequest, gains: torch.Tensor,
                    trail: tuple[list, list] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient norms [G, N] at each sublayer input and stream RMS [G, N + 1], for G gains.
    `trail`, if given, receives the first gain's read-outs [T, D] (input and after each of
    the first TRAIL_WRITES writes) and those writes."""
    gen = _generator(req.seed, req.depth, "grad")
    w = _unit_weights(gen, 2 * req.depth, req.width)
    readout = torch.randn(req.tokens, req.width, generator=gen, dtype=DTYPE)
    g = gains.to(DTYPE).view(-1, 1, 1)
    wired = wiring(replace(req, ffn=False).config())
    x = wired.open(_inputs(req).expand(len(gains), -1, -1))
    x = _x0(x) if req.x0_mix else x  # x0_mix: the stream starts at x0, as the model's does
    inputs, rms = [], [_rms(wired.close(x))]
    states, writes = trail if trail is not None else ([], [])
    with torch.enable_grad():
        x = x.detach().requires_grad_()
        x0 = x if req.x0_mix else None  # mixed into every layer's input
        for layer in range(req.depth):
            x = wired.mix(layer, req.depth, x, x0)
            if trail is not None and layer <= TRAIL_WRITES:
                states.append(wired.close(x)[0].detach())
            x.retain_grad()
            inputs.append(x)
            record = writes if trail is not None and layer < TRAIL_WRITES else None
            x = wired.write(layer, x, _tanh_sublayer, g * w[2 * layer], g * w[2 * layer + 1],
                            record=record)
            rms.append(_rms(wired.close(x)))
        if trail is not None and req.depth <= TRAIL_WRITES:
            states.append(wired.close(x)[0].detach())
        # Loss: a fixed random readout of the top's output, so only depth shapes the gradient.
        (wired.close(x) * readout).sum().backward()
    norms = torch.stack([_grad_norm(t, t.grad) for t in inputs], dim=1)
    return norms, torch.stack([r.detach() for r in rms], dim=1)


@lru_cache(maxsize=512)
def gradient_reach(req: StackRequest) -> GradResult:
    """Does the gradient reach the bottom? One stack, the switches of `req`."""
    states, writes = [], []
    norms, rms = _gradient_batch(req, torch.tensor([float(req.gain)]), (states, writes))
    norms, rms = norms[0], rms[0]
    per_layer = norms / norms[-1]
    return GradResult(req, tuple(norms.tolist()), tuple(per_layer.tolist()),
                      float(per_layer[0]), tuple(rms.tolist()),
                      Trail.of(states, [t[0] for t in writes], req.tokens + TRAIL_TOKEN))


@lru_cache(maxsize=64)
def gain_sweep(req: StackRequest, gains: tuple[float, ...] = SWEEP_GAINS) -> SweepResult:
    """Bottom/top ratio over g (default 31 gains in [0.5, 2.0]), naive and improved rows,
    each computed as one batched pass over all gains."""
    no_mixer(req)
    for value in gains:
        replace(req, gain=value)  # validates each gain
    g = torch.tensor(gains, dtype=DTYPE)
    improved, _ = _gradient_batch(req, g)
    naive, _ = _gradient_batch(req.naive(), g)
    ratio = lambda n: tuple((n[:, 0] / n[:, -1]).tolist())
    return SweepResult(req, tuple(gains), ratio(improved), ratio(naive))


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
    """Do the tokens become the same vector? A stack of token mixers (attention, Gated
    DeltaNet or the hybrid), with or without an FFN after each."""
    gen = _generator(req.seed, req.depth, "attn")
    per_layer = 5 if req.ffn else 3
    w = req.gain * _unit_weights(gen, per_layer * req.depth, req.width)
    delta = deltanet_weights(req) if req.mixer != "attention" else None
    wired = wiring(req.config())
    x = wired.open(_inputs(req).unsqueeze(0))  # [1, T, d]: one sequence, like a batch of one
    x = _x0(x) if req.x0_mix else x  # x0_mix: the stream starts at x0, as the model's does
    states = [wired.close(x)[0]]
    trail = [states[0]]  # the read-out after every write (with FFNs, two per layer)
    writes: list[torch.Tensor] = []
    x0 = x if req.x0_mix else None
    with torch.no_grad():
        k = 0
        for layer in range(req.depth):
            x = wired.mix(layer, req.depth, x, x0)
            wq, wk, wv, *ffn = w[per_layer * layer: per_layer * (layer + 1)]
            mixer = req.layer_kind(layer)
            mixing = (wq, wk, wv) + (delta[layer] if mixer == "gated_deltanet" else ())
            for sublayer, weights in ((MIXER_SUBLAYERS[mixer], mixing), (_tanh_sublayer, ffn)):
                if not weights:
                    continue
                record = writes if k < TRAIL_WRITES else None
                x = wired.write(k, x, sublayer, *weights, record=record)
                k += 1
                if k <= TRAIL_WRITES:
                    trail.append(wired.close(x)[0])
            states.append(wired.close(x)[0])
    stack = torch.stack(states)
    return CollapseResult(req, tuple(rel_distance(stack).tolist()),
                          tuple(mean_cosine(stack).tolist()), tuple(_rms(stack).tolist()),
                          Trail.of(trail, [t[0] for t in writes], req.tokens + TRAIL_TOKEN))


MODES = {"gradient": gradient_reach, "collapse": token_collapse}


def compare(req: StackRequest, mode: str) -> Comparison:
    """The naive stack beside `req`'s for one mode (gradient | collapse)."""
    probe = MODES[mode]
    if mode == "gradient":
        no_mixer(req)
    return Comparison(mode, probe(req.naive()), probe(req))


def no_mixer(req: StackRequest) -> None:
    """Gradient mode's sublayer acts on each token alone: a mixer switch there is refused."""
    _check("mixer", req.mixer == "attention", "attention in gradient mode (its sublayer, "
           "tanh(x W1) W2, acts on each token alone: there is no token mixer to switch; "
           "the mixer applies to collapse mode)", req.mixer)
