"""The simulator's bounds and switch values, in one place and without torch.

The CLI's flags, the API's request schema, /api/meta (which the page's sliders and
switches read) and the static export all take them from here; depthlab.probes.simulator
checks its requests against them.
"""

from __future__ import annotations

from depthlab.config import RESIDUALS, WIDE_RESIDUALS
from depthlab.variants import RESIDUAL_SPECS, keys_where

MAX_DEPTH = 256  # the CLI's bound; the page's slider stops at PAGE_MAX_DEPTH
PAGE_MAX_DEPTH = 64  # also the API's compute budget per request (docs/page.md)
MAX_GAIN = 10.0  # the CLI's bound
PAGE_GAINS = (0.5, 2.0)  # the page's gain slider and the API's bounds
PAGE_GAIN_STEP = 0.05
SWEEP_GAINS = tuple(round(0.5 + 0.05 * i, 2) for i in range(31))  # 0.50, 0.55, ..., 2.00
NORMS = ("none", "rmsnorm")  # the model's norm switch in the sublayer-input (pre) slot
# The model's residual registry: config.RESIDUALS (the spec table's keys), kept equal to
# RESIDUAL_BUILDERS by a test.
RESIDUAL_CHOICES = RESIDUALS
# Residuals whose norm slot is after the add (their spec allows placement=post only):
# for them the simulator's norm switch puts the RMSNorm there.
POST_NORM_RESIDUALS = keys_where(lambda s: s.norm_slot == "post")
# Residuals that keep the stream normalised themselves and allow no norm (their spec's
# norms are ("none",): nGPT): for them the norm switch is off and cannot be turned on.
NORM_FREE_RESIDUALS = keys_where(lambda s: s.norms == ("none",))
# The copies of the stream the toy stack gives a residual of config.WIDE_RESIDUALS
# (hyper-connections): DeepSeek-V4's hc_mult and the residual-frontier experiment's n.
SIM_STREAMS = 4
# Residuals whose stream is the history of writes (attnres): x0 mixing does not apply.
HISTORY_RESIDUALS = keys_where(lambda s: s.widens == "history")
# Residuals the x0-mixing switch (model.x0_mix) applies to: those with one stream that a
# norm may touch. It mixes one [.., T, D] stream, so not a widened one or a history of
# writes, and nGPT keeps its stream on the unit sphere, which the mix would leave.
X0_MIX_RESIDUALS = tuple(r for r in RESIDUAL_CHOICES
                         if r not in WIDE_RESIDUALS + HISTORY_RESIDUALS + NORM_FREE_RESIDUALS)
# The mix as the page prints it before the residual's write (depthlab.model.shortcuts:
# lambda_i = resid_i from 1.15 to 1.05, mu_i = x0_i from 0.20 to 0.05 over depth).
X0_MIX_FORMULA = "x ← λᵢ·x + μᵢ·x₀"


def norm_slot(residual: str) -> str:
    """Where the norm switch puts the RMSNorm for `residual`: "post" (after the add) for a
    Post-LN design, else "pre" (on the sublayer's input)."""
    return RESIDUAL_SPECS[residual].norm_slot


def page_bounds() -> dict:
    """What /api/meta and the static export publish as `simulator`: the page's controls."""
    return {"depth": [1, PAGE_MAX_DEPTH], "gain": list(PAGE_GAINS), "gain_step": PAGE_GAIN_STEP,
            "cli_max_depth": MAX_DEPTH, "residuals": list(RESIDUAL_CHOICES),
            "norms": list(NORMS), "post_norm": [r for r in RESIDUAL_CHOICES if norm_slot(r) == "post"],
            "norm_free": [r for r in RESIDUAL_CHOICES if r in NORM_FREE_RESIDUALS],
            "x0_mix": list(X0_MIX_RESIDUALS), "x0_formula": X0_MIX_FORMULA,
            "streams": {r: SIM_STREAMS for r in RESIDUAL_CHOICES if r in WIDE_RESIDUALS},
            # the write of each residual, with the marks the page fills (depthlab.variants)
            "formulas": {r: RESIDUAL_SPECS[r].formula for r in RESIDUAL_CHOICES},
            "labels": {r: RESIDUAL_SPECS[r].label_key for r in RESIDUAL_CHOICES}}
