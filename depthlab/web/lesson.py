"""Config-derived facts for the page: the block diagram of a preset, and the bounds,
placements and presets that /api/meta (and a static copy's meta) publish.

The diagram is drawn from the same data the model is built from: the placement's
norm slots (`NORM_SLOTS`), the residual mode and the sublayer switches.
"""

from __future__ import annotations

from dataclasses import replace

from depthlab.config import NORM_LABELS, PLACEMENTS, validate_model
from depthlab.presets import describe_presets, get_preset
from depthlab.probes.simulator_bounds import page_bounds
from depthlab.variants import public_specs


def block(preset: str, placement: str | None = None) -> dict:
    """One block of `preset` (optionally with another placement) as diagram data."""
    from depthlab.model.transformer import NORM_SLOTS

    m = get_preset(preset).model
    if placement is not None:  # checked like any config: allowed values, needs a norm
        m = validate_model(replace(m, placement=placement))
    slots = list(NORM_SLOTS[m.placement]) if m.norm != "none" else []
    return {"preset": preset, "placement": m.placement, "norm": m.norm,
            "norm_label": NORM_LABELS[m.norm], "slots": slots,
            "residual": m.residual, "ffn": m.ffn, "ffn_hidden": m.ffn_hidden,
            "d_model": m.d_model, "n_layers": m.n_layers, "writes": m.n_writes,
            "attn_gate": m.attn_gate, "qk_norm": m.qk_norm, "final_norm": m.final_norm,
            "write_scale": m.write_scale}


def presets() -> list[dict]:
    return [{"name": n, "summary": s} for n, s in describe_presets()]


def _bounds(model, field: str) -> list:
    """[ge, le] of one field of a request schema: the bound the server enforces."""
    meta = model.model_fields[field].metadata
    return [next(m.ge for m in meta if hasattr(m, "ge")), next(m.le for m in meta if hasattr(m, "le"))]


def limits() -> dict:
    """Every input bound the page enforces, from the request schemas that enforce it."""
    from depthlab.web.guard import MAX_BODY
    from depthlab.web.schemas import (
        BUDGETS,
        MAX_ABS,
        MAX_G,
        MAX_GROWTH_WRITES,
        MAX_N,
        MAX_VECTOR,
        MIN_G,
        PathsRequest,
    )

    return {"n": [1, MAX_N], "g": [MIN_G, MAX_G], "g_step": 0.05, "vector_length": MAX_VECTOR,
            "vector_abs": MAX_ABS,
            "paths_n": _bounds(PathsRequest, "n"), "paths_a": _bounds(PathsRequest, "a"),
            "growth_writes": [1, MAX_GROWTH_WRITES], "budgets": list(BUDGETS),
            "background_runs": 1, "max_body_bytes": MAX_BODY}


def page_facts() -> dict:
    """What /api/meta and a static copy's meta both tell the page: bounds, the norm
    placements a block can take, the presets, each residual's and norm's spec (labels,
    formulas, whether it widens the stream). The page hard-codes none of them."""
    return {"limits": limits(), "placements": list(PLACEMENTS), "presets": presets(),
            "simulator": page_bounds(), "variants": public_specs()}
