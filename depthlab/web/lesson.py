"""Config-derived facts for the page: the block diagram of a preset.

The diagram is drawn from the same data the model is built from: the placement's
norm slots (`NORM_SLOTS`), the residual mode and the sublayer switches.
"""

from __future__ import annotations

from dataclasses import replace

from depthlab.config import validate_model


def block(preset: str, placement: str | None = None) -> dict:
    """One block of `preset` (optionally with another placement) as diagram data."""
    from depthlab.model.transformer import NORM_SLOTS
    from depthlab.presets import get_preset

    m = get_preset(preset).model
    if placement is not None:  # checked like any config: allowed values, needs a norm
        m = validate_model(replace(m, placement=placement))
    slots = list(NORM_SLOTS[m.placement]) if m.norm != "none" else []
    return {"preset": preset, "placement": m.placement, "norm": m.norm, "slots": slots,
            "residual": m.residual, "ffn": m.ffn, "ffn_hidden": m.ffn_hidden,
            "d_model": m.d_model, "n_layers": m.n_layers, "writes": m.n_writes,
            "attn_gate": m.attn_gate, "qk_norm": m.qk_norm, "final_norm": m.final_norm,
            "write_scale": m.write_scale}


def presets() -> list[dict]:
    from depthlab.presets import describe_presets

    return [{"name": n, "summary": s} for n, s in describe_presets()]
