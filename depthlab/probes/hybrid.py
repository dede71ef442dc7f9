"""Parameter anatomy of a hybrid checkpoint in the Qwen3.5 layout (`model_type` qwen3_5):
a trunk whose layers are either gated full attention or Gated-DeltaNet linear
attention (`layer_types`, or every `full_attention_interval`-th layer full), each
followed by a SwiGLU FFN; an untied vocabulary; a vision tower; multi-token-prediction
(MTP) layers. depthlab's own model has no linear attention, so these counts are
written out from the architecture, with the field names of transformers' Qwen3.5
config classes (the family's entry in depthlab/hf/mapping.py reads the rest);
tests/test_anatomy.py checks every component against transformers' own model built
on the meta device.
"""

from __future__ import annotations

from typing import Any

from depthlab.config import ModelConfig
from depthlab.errors import UserError
from depthlab.hf.config_map import text_config

FULL, LINEAR = "full_attention", "linear_attention"


def _int(tc: dict[str, Any], key: str, default: int | None = None) -> int:
    value = tc.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"config.json: {key} must be a positive integer, got {value!r}")
    return value


def layer_types(tc: dict[str, Any]) -> list[str]:
    """Each trunk layer's kind, as transformers derives it: `layer_types` when given, else
    full attention every `full_attention_interval` layers (default 4), linear otherwise."""
    n = _int(tc, "num_hidden_layers")
    kinds = tc.get("layer_types")
    if kinds is None:
        every = _int(tc, "full_attention_interval", 4)
        return [LINEAR if (i + 1) % every else FULL for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n or not set(kinds) <= {FULL, LINEAR}:
        raise UserError(f"config.json: layer_types must list {n} entries, each {FULL!r} or "
                        f"{LINEAR!r}")
    return list(kinds)


def full_attention(m: ModelConfig, tc: dict[str, Any]) -> dict[str, int]:
    """One gated full-attention layer: q_proj (query and its sigmoid output gate when
    attn_output_gate), k_proj, v_proj, o_proj; q_norm and k_norm over a head. Heads, head
    size and gate are those of `m`, the full-attention model the one Hugging Face mapping
    reads (its class defaults: 4 KV heads, head_dim 256), so counts and shapes agree."""
    d, H, K, E = m.d_model, m.n_heads, m.kv_heads, m.head_size
    gate = 2 if m.attn_gate else 1
    bias = tc.get("attention_bias", False)
    if not isinstance(bias, bool):
        raise UserError(f"config.json: attention_bias must be true or false, got {bias!r}")
    weights = d * H * E * gate + 2 * d * K * E + H * E * d
    biases = int(bias) * (H * E * gate + 2 * K * E + d)
    return {"attention": weights + biases, "norm": 2 * E}


def linear_attention(tc: dict[str, Any]) -> dict[str, int]:
    """One Gated-DeltaNet layer. projections: in_proj_qkv (d -> 2 key_dim + value_dim) and
    out_proj (value_dim -> d); gates: in_proj_z (the output gate, d -> value_dim),
    in_proj_b (write strength beta) and in_proj_a (decay alpha, d -> value heads each), with
    A_log and dt_bias per value head; conv: the depthwise causal conv1d over q, k, v;
    norm: the gated RMSNorm over a value head."""
    d = _int(tc, "hidden_size")
    nk, nv = _int(tc, "linear_num_key_heads", 16), _int(tc, "linear_num_value_heads", 32)
    dk, dv = _int(tc, "linear_key_head_dim", 128), _int(tc, "linear_value_head_dim", 128)
    key_dim, value_dim = nk * dk, nv * dv
    conv_dim = 2 * key_dim + value_dim
    return {"linear_projections": d * conv_dim + value_dim * d,
            "linear_gates": d * value_dim + 2 * d * nv + 2 * nv,
            "linear_conv": conv_dim * _int(tc, "linear_conv_kernel_dim", 4),
            "norm": dv}


def ffn(tc: dict[str, Any]) -> int:
    d, f = _int(tc, "hidden_size"), _int(tc, "intermediate_size")
    return 3 * d * f  # SwiGLU: gate_proj, up_proj, down_proj


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


def mtp_layer(m: ModelConfig, tc: dict[str, Any]) -> int:
    """One multi-token-prediction layer as the checkpoint stores it (mtp.*; transformers
    skips these weights): fc joining the embedding and the hidden state (2d -> d), their
    two RMSNorms, one full-attention decoder layer with its FFN, a final RMSNorm. It
    shares the embedding and the LM head with the trunk."""
    d = _int(tc, "hidden_size")
    attn = full_attention(m, tc)
    return 2 * d * d + 2 * d + (attn["attention"] + attn["norm"] + ffn(tc) + 2 * d) + d


def hybrid_counts(raw: dict[str, Any], m: ModelConfig) -> dict[str, int]:
    """Parameters by component of the whole checkpoint; `m` is the model the Hugging Face
    mapping reads from `raw` (its full-attention layers' heads and head size)."""
    tc = text_config(raw)
    d, V = _int(tc, "hidden_size"), _int(tc, "vocab_size")
    kinds = layer_types(tc)
    n_full, n_linear = kinds.count(FULL), kinds.count(LINEAR)
    full, lin = full_attention(m, tc), linear_attention(tc)
    tied = tc.get("tie_word_embeddings", False)  # text_config puts the top level's first
    counts = {
        "embedding": V * d,
        "attention": n_full * full["attention"],
        "linear_projections": n_linear * lin["linear_projections"],
        "linear_gates": n_linear * lin["linear_gates"],
        "linear_conv": n_linear * lin["linear_conv"],
        "ffn": len(kinds) * ffn(tc),
        "norm": len(kinds) * 2 * d + n_full * full["norm"] + n_linear * lin["norm"] + d,
        "lm_head": 0 if tied else V * d,
    }
    if isinstance(raw.get("vision_config"), dict):
        counts["vision"] = vision_tower(raw["vision_config"])
    mtp = tc.get("mtp_num_hidden_layers", 0)
    if mtp:
        counts["mtp"] = _int(tc, "mtp_num_hidden_layers") * mtp_layer(m, tc)
    return {k: v for k, v in counts.items() if v}


TEXT_ONLY = ("vision", "mtp")  # left out of the text-only denominator


def ffn_shares(counts: dict[str, int]) -> tuple[float, float]:
    """(trunk FFN / all checkpoint weights, trunk FFN / the text model: embedding, trunk,
    final norm and LM head, without the vision tower and the MTP layers)."""
    total = sum(counts.values())
    text = total - sum(counts.get(k, 0) for k in TEXT_ONLY)
    return counts["ffn"] / total, counts["ffn"] / text
