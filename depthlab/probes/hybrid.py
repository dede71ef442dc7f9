"""What a Qwen3.5-layout hybrid checkpoint (`model_type` qwen3_5) holds beyond the text
trunk depthlab builds: a vision tower and multi-token-prediction (MTP) layers.

The trunk (Gated DeltaNet and gated attention layers, model.layer_pattern) is depthlab's
own model, counted on the meta device like any other (depthlab.model.summary). The MTP
layers are depthlab blocks too: one full-attention block each, plus the projection that
joins the embedding and the hidden state. The vision tower is the one part depthlab has
no model for, so it is counted from its config with the field names of transformers'
Qwen3_5VisionConfig; tests/test_anatomy.py checks every component against transformers'
own model built on the meta device.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from depthlab.config import ModelConfig
from depthlab.errors import UserError
from depthlab.probes.stages import param_counts


def _int(cfg: dict[str, Any], key: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"config.json: {key} must be a positive integer, got {value!r}")
    return value


def vision_tower(vc: dict[str, Any]) -> int:
    """Patch embedding (a Conv3d with bias), learned positions, `depth` pre-LayerNorm ViT
    blocks with biases, and the merger that joins spatial_merge_size^2 patches into one
    vector of the language model's width."""
    h, f = _int(vc, "hidden_size", 1152), _int(vc, "intermediate_size", 4304)
    p, t = _int(vc, "patch_size", 16), _int(vc, "temporal_patch_size", 2)
    merged = h * _int(vc, "spatial_merge_size", 2) ** 2
    patch = _int(vc, "in_channels", 3) * t * p * p * h + h
    block = 2 * 2 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h)
    out = _int(vc, "out_hidden_size", 3584)  # Qwen3_5VisionConfig's default
    merger = 2 * h + (merged * merged + merged) + (merged * out + out)
    return patch + _int(vc, "num_position_embeddings", 2304) * h + \
        _int(vc, "depth", 27) * block + merger


def mtp_layer(m: ModelConfig) -> int:
    """One multi-token-prediction layer as the checkpoint stores it (mtp.*; transformers
    skips these weights): fc joining the embedding and the hidden state (2d -> d), their
    two RMSNorms and a final one, and one full-attention block of the trunk (depthlab's
    Block, counted as built). It shares the embedding and the LM head with the trunk."""
    d = m.d_model
    block = param_counts(replace(m, n_layers=1, mixer="attention", layer_pattern=None)).block
    return 2 * d * d + 3 * d + block["total"]


TEXT_ONLY = ("vision", "mtp")  # left out of the text-only denominator


def ffn_shares(counts: dict[str, int]) -> tuple[float, float]:
    """(trunk FFN / all checkpoint weights, trunk FFN / the text model: embedding, trunk,
    final norm and LM head, without the vision tower and the MTP layers)."""
    total = sum(counts.values())
    text = total - sum(counts.get(k, 0) for k in TEXT_ONLY)
    return counts["ffn"] / total, counts["ffn"] / text
