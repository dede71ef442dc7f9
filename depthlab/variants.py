"""What each residual and norm variant is, in one table without torch.

The model's registries (`depthlab.model.residual.RESIDUAL_BUILDERS`,
`depthlab.model.norms.NORM_CLASSES`) say how to *build* a variant; this module says
what it *is*, for everything that must know without building it: config validation
and `write_scale` (depthlab.config), parameter and memory estimates
(depthlab.config.approx_params, depthlab.memory), the simulator's switches and the
page's labels and formulas (depthlab.probes.simulator_bounds, /api/meta), the API
schemas' descriptions and Hugging Face export. Tests hold the registry keys equal to
the spec keys and each spec's parameter count to the built model's (tests/test_variants.py,
tests/test_reliability.py), so a new variant is its registry entry, its spec here, its
known-answer test and its two locale labels (docs/architecture.md).

A residual's `formula` is the write as the simulator page prints it, with three marks
the page fills from its switches: `F(h)` is the sublayer on h (with the pre-norm on,
F(RMSNorm(h))), `⟦e⟧` the norm slot after the add (RMSNorm(e) with the norm on, else e),
and `{n}` the copies of the stream.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WIDENS = ("", "copies", "history")  # one stream; model.streams copies; every earlier write


def _none(d: int, n: int) -> int:
    return 0


def _one(n_writes: int) -> float:
    return 1.0


def _no_state(d: int, n: int, writes: int) -> int:
    return 0


@dataclass(frozen=True)
class ResidualSpec:
    """One entry of the residual registry (depthlab.model.residual)."""

    key: str  # the registry key: CLI, config.json, metric log and page
    formula: str  # the write, as the simulator page prints it (marks: module docstring)
    init: str  # the init rule, in words
    source: str = ""  # where the design comes from (the docs' tables cite it)
    widens: str = ""  # one of WIDENS: "copies" takes model.streams, "history" keeps all writes
    placements: tuple[str, ...] = ()  # the placements it allows; () = all
    placement_why: str = ""  # what it is, for the refusal of another placement
    norms: tuple[str, ...] = ()  # the model.norm values it allows; () = all
    norm_why: str = ""  # why, for the refusal of another norm
    # Learned parameters of one write, for d_model d and n streams (exact; held to the
    # built model by tests/test_reliability.py).
    params: Callable[[int, int], int] = _none
    # Floats per token its state keeps for backward over all `writes`, beyond one stream's
    # (depthlab.memory; fitted to measured peaks, see there).
    wide_floats: Callable[[int, int, int], int] = _no_state
    write_scale: Callable[[int], float] = _one  # each write's factor, from the writes 2L
    own_depth_init: bool = False  # brings its own depth rule instead of scaled_init's
    hf_export: bool = False  # `hf export` can write it (the Llama/Qwen families' residual)
    ffns: tuple[str, ...] = ()  # the model.ffn values it allows; () = all
    ffn_why: str = ""  # why, for the refusal of another FFN
    # Keeps hidden states and weight rows on the unit sphere (nGPT): the model gives q/k,
    # SwiGLU and the logits their scales, renormalises the weights after every step, and no
    # shortcut may add a vector off the sphere to the stream.
    sphere: bool = False
    # How a write lands in the stream, as the simulator's trail measures it on a token:
    # "add" (x + w), "replace" (w), "other" (x rescaled, or copies mixed).
    write_rule: str = "add"

    @property
    def widens_copies(self) -> bool:
        """Carries model.streams copies of the stream (hyper-connections)."""
        return self.widens == "copies"

    @property
    def keeps_history(self) -> bool:
        """Its stream is the history of every write (attention residuals)."""
        return self.widens == "history"

    @property
    def needs_no_norm(self) -> bool:
        """Keeps the stream normalised itself and allows no norm layer (nGPT)."""
        return self.norms == ("none",)

    @property
    def is_post(self) -> bool:
        """A Post-LN design: its norm sits after the add (the simulator's norm switch too)."""
        return self.placements == ("post",)

    @property
    def takes_x0_mix(self) -> bool:
        """model.x0_mix applies: it mixes one [.., T, D] stream, so not a widened one or a
        history of writes, and not one kept on the unit sphere, which the mix would leave."""
        return not self.widens and not self.sphere and not self.needs_no_norm

    @property
    def label_key(self) -> str:
        """Its name on the page: a key of depthlab/locales/{en,zh}/page.json."""
        return f"sim.res.{self.key}"

    @property
    def norm_slot(self) -> str:
        """Where a single norm switch puts the norm: "post" for a Post-LN design."""
        return "post" if self.is_post else "pre"

    def public(self) -> dict[str, Any]:
        """What /api/meta publishes of it (the callables as their values where fixed)."""
        return {"key": self.key, "label_key": self.label_key, "formula": self.formula,
                "init": self.init, "widens": self.widens, "placements": list(self.placements),
                "norms": list(self.norms),
                "norm_slot": self.norm_slot, "hf_export": self.hf_export}


@dataclass(frozen=True)
class NormSpec:
    """One entry of the norm registry (depthlab.model.norms), or "none"."""

    key: str
    label: str  # its name in the block diagram and the tables (a proper name, the same in
    #             every language, so it lives here rather than in the locales)
    formula: str
    init: str
    params: Callable[[int], int] = lambda d: 0  # learned parameters of one norm of width d
    source: str = ""  # where the design comes from (the docs' tables cite it)
    hf_export: bool = False  # an exported Hugging Face family (Llama, Qwen, Qwen3.5) uses it

    def public(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "formula": self.formula,
                "init": self.init, "hf_export": self.hf_export}


def _hc_params(d: int, n: int) -> int:
    """A (n x n+1), B (n), W_a (d x n+1), W_b (d) and two scales (depthlab.model.hyper)."""
    return n * (n + 1) + n + d * (n + 1) + d + 2


def _mhc_params(d: int, n: int) -> int:
    """A [(2+n) n, n d] projection, its bias and three scales (depthlab.model.hyper)."""
    return (2 + n) * n * (n * d + 1) + 3


# Memory (depthlab.memory): hc ~4 n d a write (n copies, read and mixed), mhc that plus its
# 20 Sinkhorn steps over n x n, attnres the history it concatenates (write k holds k + 1
# entries). Fitted to the measured peak of a training step of the course model at n = 1, 4
# and 16 (hc 3.0-3.6 n d, mhc 4.1-8.5 n d, attnres ~1.7 k d).
RESIDUAL_SPECS: dict[str, ResidualSpec] = {s.key: s for s in (
    ResidualSpec("none", "x ← F(x)", "no skip path: the stack of the naive plan",
                 write_rule="replace"),
    ResidualSpec("plain", "x ← x + F(x)", "nothing to initialise (He et al. 2016)",
                 hf_export=True, source="He et al. 2016"),
    ResidualSpec("scaled", "x ← x + F(x) / √N", "each of the 2L writes times 1/sqrt(2L) at run time",
                 write_scale=lambda writes: 1.0 / math.sqrt(writes),
                 source="GPT-2's 1/sqrt(2L) (Radford et al. 2019) on the writes"),
    ResidualSpec("rezero", "x ← x + a·F(x), a = 0",
                 "one scalar a per write, 0 at init: every block starts as the identity",
                 params=lambda d, n: 1, source="Bachlechner et al. 2020"),
    ResidualSpec("deepnorm", "x ← ⟦α·x + F(x)⟧, α = (2L)^¼, L = ⌈N/2⌉, W·β",
                 "Xavier-normal v/o/FFN weights times beta = (8L)^(-1/4); alpha = (2L)^(1/4)",
                 placements=("post",), placement_why="Post-LN, LN(alpha*x + F(x))",
                 own_depth_init=True, write_rule="other",
                 source="DeepNet (Wang et al. 2022)"),
    ResidualSpec("hc", "H ← A_rᵀH + Bᵀ·F(A_mᵀH) ({n} × x)",
                 "A_m = e_(k mod n), A_r = I, B = 1, dynamic parts 0, their scales 0.01 (Zhu et al., eq. 14)",
                 widens="copies", params=_hc_params,
                 wide_floats=lambda d, n, writes: writes * 4 * n * d,
                 write_rule="other", source="Zhu et al., ICLR 2025"),
    ResidualSpec("mhc", "H ← combᵀH + post·F(preᵀH) ({n} × x, combᵀ 1 = 1)",
                 "projection ~ N(0, init_std), bias 0, scales 1; comb made doubly stochastic by Sinkhorn",
                 widens="copies", params=_mhc_params,
                 wide_floats=lambda d, n, writes: writes * (4 * n * d + 40 * n * n),
                 write_rule="other", source="DeepSeek mHC, as in DeepSeek-V4"),
    ResidualSpec("attnres", "x_l = k·Σᵢ softmax(w·vᵢ)·vᵢ; v_l = F(x_l), w = 0",
                 "query w = 0 per write: every read starts as the mean of the earlier writes",
                 widens="history", params=lambda d, n: d,
                 wide_floats=lambda d, n, writes: writes * (writes + 1) * d,
                 source="Kimi, Attention Residuals 2026"),
    ResidualSpec("ngpt", "x ← N(x + α·(N(F(x)) − x)), N(v) = v/‖v‖",
                 "α = 0.05 per dimension (stored at 1/√d); embedding and every weight row "
                 "on the unit sphere, kept there after every step; no norm layers "
                 "(Loshchilov et al. 2025)",
                 placements=("pre",), placement_why="the normalised Transformer (nGPT), "
                 "with no norm layer to place", norms=("none",),
                 norm_why="keeps every hidden state on the unit sphere itself, with no norm "
                 "layer", params=lambda d, n: d, ffns=("swiglu",),
                 ffn_why="scales SwiGLU's two inputs (s_u, s_v)", sphere=True,
                 write_rule="other", source="nGPT (Loshchilov et al., ICLR 2025)"),
)}

NORM_SPECS: dict[str, NormSpec] = {s.key: s for s in (
    NormSpec("none", "", "h", "no norm"),
    NormSpec("layernorm", "LayerNorm", "(x - mean) / sqrt(var + eps) · γ + β", "γ = 1, β = 0",
             params=lambda d: 2 * d, source="Ba et al. 2016"),
    NormSpec("rmsnorm", "RMSNorm", "x / sqrt(mean(x²) + eps) · w", "w = 1",
             params=lambda d: d, hf_export=True, source="Zhang & Sennrich 2019"),
    NormSpec("rmsnorm_zero_centered", "RMSNorm (1+w)", "x / sqrt(mean(x²) + eps) · (1 + w)",
             "w = 0", params=lambda d: d, hf_export=True,  # Qwen3.5's
             source="Gemma, Qwen3-Next, Qwen3.5"),
    NormSpec("dyt", "DyT", "w · tanh(α·x) + b", "α = 0.5, w = 1, b = 0",
             params=lambda d: 2 * d + 1, source="Zhu et al. 2025"),
)}

# The other registries, keys only (their facts live with their code).
PLACEMENTS = ("pre", "post", "sandwich", "output")
# Which of a sublayer's three optional norm slots each placement fills (depthlab.model's
# Block builds them; the parameter count reads how many):
#   in   -> Norm before the sublayer          x + F(Norm(x))        (Pre-LN, GPT-2 onward)
#   out  -> Norm on the sublayer's output     x + Norm(F(x))        (OLMo 2; with in: sandwich)
#   post -> Norm after the add                Norm(x + F(x))        (Post-LN, Vaswani 2017)
NORM_SLOTS = {
    "pre": ("in",),
    "post": ("post",),
    "sandwich": ("in", "out"),
    "output": ("out",),
}
FFNS = ("relu", "gelu", "swiglu")


@dataclass(frozen=True)
class MixerSpec:
    """One token mixer (model.mixer; a letter of model.layer_pattern)."""

    key: str  # the ModelConfig value
    letter: str  # its letter in model.layer_pattern
    formula: str  # what it computes per token, as the README and `model describe` say it
    state: str  # what it keeps of the earlier tokens while decoding
    source: str
    decode_step: bool  # the fused one-token step computes it (else: the readable forward)


MIXER_SPECS: dict[str, MixerSpec] = {s.key: s for s in (
    MixerSpec("attention", "A", "o_t = Σ_{s≤t} softmax_s(q_t·k_s/√E) v_s",
              "every earlier key and value (KV cache, grows with the context)",
              "Vaswani et al. 2017", decode_step=True),
    MixerSpec("gated_deltanet", "L",
              "S_t = S_{t-1}·e^{g_t} − β_t k_t (k_tᵀ S_{t-1} e^{g_t} − v_tᵀ); o_t = S_tᵀ q_t",
              "a Dk x Dv state per value head and the last K-1 conv inputs (fixed size)",
              "Yang, Kautz, Hatamizadeh 2025 (Gated DeltaNet); Qwen3.5", decode_step=False),
)}


def keys_where(predicate: Callable[[ResidualSpec], bool]) -> tuple[str, ...]:
    """The residual keys whose spec satisfies `predicate`, in registry order."""
    return tuple(k for k, s in RESIDUAL_SPECS.items() if predicate(s))


def public_specs() -> dict[str, list[dict[str, Any]]]:
    """Every spec as /api/meta publishes it: the page's labels, formulas and widths."""
    return {"residuals": [s.public() for s in RESIDUAL_SPECS.values()],
            "norms": [s.public() for s in NORM_SPECS.values()]}


@dataclass(frozen=True)
class ShortcutSpec:
    """One stream shortcut (depthlab.model.shortcuts): a ModelConfig switch of its own,
    on top of any residual and norm."""

    key: str  # the ModelConfig field
    formula: str  # what it computes, as the README and `model describe` say it
    init: str  # the init rule, in words
    source: str  # where the design comes from
    off: Any = False  # the field's value when it is off (its default)
    one_stream: bool = True  # mixes one [B, T, D] stream: refused with a widening residual
    hf_export: bool = False  # `hf export` can write it (no Llama/Qwen family has one)


SHORTCUT_SPECS: dict[str, ShortcutSpec] = {s.key: s for s in (
    ShortcutSpec("x0_mix", "x ← resid_i·x + x0_i·x0 before block i; x0 = RMSNorm(embedding)",
                 "resid 1.15 → 1.05, x0 0.20 → 0.05, linear over depth", "nanochat"),
    ShortcutSpec("backout", "x ← x − λ·x_mid before the final norm; x_mid after block L//2",
                 "λ = 0.2", "nanochat"),
    ShortcutSpec("value_embeds", "v ← v + 3σ(W·h[:12])·E_i[token] on every other layer",
                 "E uniform with std 1/√d, W uniform in [0, 0.02]", "nanochat",
                 one_stream=False),
    ShortcutSpec("smear", "x_t ← x_t + λ·σ(w·x_t[:24])·x_(t−1)",
                 "λ = 0, w uniform in [0, 0.02]", "nanochat", one_stream=False),
    ShortcutSpec("unet_skips", "x ← x + w_j·(output of block j) before block L−1−j",
                 "w_j = 1", "modded-nanogpt"),
    ShortcutSpec("logit_softcap", "logits ← cap·tanh(logits / cap)", "no parameters",
                 "Gemma 2; nanochat (15)", off=None, one_stream=False),
)}
