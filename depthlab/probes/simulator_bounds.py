"""The simulator's bounds and switch values, in one place and without torch.

The CLI's flags, the API's request schema, /api/meta (which the page's sliders and
switches read) and the static export all take them from here; depthlab.probes.simulator
checks its requests against them.
"""

from __future__ import annotations

from depthlab.config import DELTANET_REFUSES_RESIDUAL, MIXERS, RESIDUALS
from depthlab.variants import RESIDUAL_SPECS, keys_where

MAX_DEPTH = 256  # the CLI's bound; the page's slider stops at PAGE_MAX_DEPTH
PAGE_MAX_DEPTH = 64  # also the API's compute budget per request (docs/page.md)
MAX_GAIN = 10.0  # the CLI's bound
PAGE_GAINS = (0.5, 2.0)  # the page's gain slider and the API's bounds
PAGE_GAIN_STEP = 0.05
SWEEP_GAINS = tuple(round(0.5 + 0.05 * i, 2) for i in range(31))  # 0.50, 0.55, ..., 2.00
NORMS = ("none", "rmsnorm")  # the model's norm switch in the sublayer-input (pre) slot
# The switches read each residual's spec (depthlab.variants): `is_post` puts the norm
# switch's RMSNorm after the add, `needs_no_norm` turns the switch off, `widens_copies`
# gives the toy stack SIM_STREAMS copies, `takes_x0_mix` allows x0 mixing.
# The collapse mode's token mixer: each of the model's mixers (depthlab.variants.MIXER_SPECS)
# on every layer, or `hybrid`, the lesson anchor's 3 Gated DeltaNet layers to 1 attention
# layer (Qwen3.5's full_attention_interval 4; the qwen3_5 preset's pattern LLLA), repeated.
HYBRID = "hybrid"
SIM_MIXERS = (*MIXERS, HYBRID)
HYBRID_KINDS = ("gated_deltanet", "gated_deltanet", "gated_deltanet", "attention")
# The copies of the stream the toy stack gives a residual that widens it (hyper-connections):
# DeepSeek-V4's hc_mult and the residual-frontier experiment's n.
SIM_STREAMS = 4
# The mix as the page prints it before the residual's write (depthlab.model.shortcuts:
# lambda_i = resid_i from 1.15 to 1.05, mu_i = x0_i from 0.20 to 0.05 over depth).
X0_MIX_FORMULA = "x ← λᵢ·x + μᵢ·x₀"


def page_bounds() -> dict:
    """What /api/meta and the static export publish as `simulator`: the page's controls."""
    return {"depth": [1, PAGE_MAX_DEPTH], "gain": list(PAGE_GAINS), "gain_step": PAGE_GAIN_STEP,
            "cli_max_depth": MAX_DEPTH, "residuals": list(RESIDUALS),
            "norms": list(NORMS), "mixers": list(SIM_MIXERS), "hybrid": list(HYBRID_KINDS),
            # the residuals the model's Gated DeltaNet layer refuses (depthlab.config)
            "mixer_refused": list(keys_where(lambda s: any(applies(s) for applies, _
                                                           in DELTANET_REFUSES_RESIDUAL))),
            "post_norm": list(keys_where(lambda s: s.is_post)),
            "norm_free": list(keys_where(lambda s: s.needs_no_norm)),
            "x0_mix": list(keys_where(lambda s: s.takes_x0_mix)), "x0_formula": X0_MIX_FORMULA,
            "streams": {r: SIM_STREAMS for r in keys_where(lambda s: s.widens_copies)},
            # the write of each residual, with the marks the page fills (depthlab.variants)
            "formulas": {r: RESIDUAL_SPECS[r].formula for r in RESIDUALS},
            "labels": {r: RESIDUAL_SPECS[r].label_key for r in RESIDUALS}}
