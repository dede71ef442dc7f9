"""Hugging Face `config.json` <-> our ModelConfig, for Llama, Qwen2 and Qwen3.

The three architectures are one point each in our switch space (Pre-RMSNorm,
SwiGLU, RoPE, plain residual, final norm); they differ only in QK-norm, q/k/v
biases, grouping and sizes. Anything outside that point is refused with a
message naming the field, never silently dropped.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from depthlab.config import Config, ModelConfig, TrainConfig, validate
from depthlab.errors import UserError

ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}

# Values Transformers assumes when a field is missing from config.json (its config classes).
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"rms_norm_eps": 1e-6, "tie_word_embeddings": False, "max_position_embeddings": 2048,
              "initializer_range": 0.02, "attention_bias": False, "mlp_bias": False},
    "qwen2": {"rms_norm_eps": 1e-6, "tie_word_embeddings": False, "max_position_embeddings": 32768,
              "initializer_range": 0.02, "num_key_value_heads": 32},
    "qwen3": {"rms_norm_eps": 1e-6, "tie_word_embeddings": False, "max_position_embeddings": 32768,
              "initializer_range": 0.02, "num_key_value_heads": 32, "head_dim": 128,
              "attention_bias": False},
}
DEFAULT_ROPE_THETA = 10000.0

# Fields that would change the computation in ways our model does not implement,
# refused whenever they hold anything but an "off" value.
_OFF = (None, False, 0, 1, 1.0, [], {})
_REFUSED_FIELDS = (
    "num_experts", "num_local_experts", "moe_intermediate_size", "num_experts_per_tok",
    "decoder_sparse_step", "shared_expert_intermediate_size", "quantization_config",
    "attn_logit_softcapping", "final_logit_softcapping", "logits_scaling",
    "embedding_multiplier", "residual_multiplier", "attention_multiplier",
)

# HF field -> our field, for the README and `depthlab hf import --help`.
FIELD_MAP = [
    ("architectures[0]", "(selects llama | qwen2 | qwen3)"),
    ("vocab_size", "model.vocab_size"),
    ("max_position_embeddings", "model.context_len"),
    ("num_hidden_layers", "model.n_layers"),
    ("hidden_size", "model.d_model"),
    ("num_attention_heads", "model.n_heads"),
    ("num_key_value_heads", "model.n_kv_heads"),
    ("head_dim", "model.head_dim"),
    ("intermediate_size", "model.d_ff (ffn=swiglu, hidden_act must be silu)"),
    ("rms_norm_eps", "model.norm_eps (norm=rmsnorm)"),
    ("rope_parameters.rope_theta | rope_theta", "model.rope_theta (rope_type default only)"),
    ("tie_word_embeddings", "model.tie_embeddings"),
    ("Qwen3 (q_norm, k_norm)", "model.qk_norm=true"),
    ("Qwen2 (q/k/v bias)", "model.qkv_bias=true"),
    ("Llama attention_bias + mlp_bias", "model.bias=true (both or neither)"),
    ("initializer_range", "model.init_std (scaled_init=false)"),
]


def _refuse(field: str, value: Any, why: str) -> UserError:
    return UserError(f"config.json field {field}={_js(value)} is not supported: {why}")


def _js(value: Any) -> str:
    """A value as config.json and `--set` spell it (true, null, "llama3")."""
    return json.dumps(value)


def architecture_of(raw: dict[str, Any]) -> str:
    """llama | qwen2 | qwen3 from `architectures` (or `model_type` when that is missing)."""
    archs = raw.get("architectures")
    supported = ", ".join(ARCHITECTURES)
    if archs:
        if not isinstance(archs, list) or len(archs) != 1 or archs[0] not in ARCHITECTURES:
            raise _refuse("architectures", archs, f"depthlab reads {supported}")
        kind = ARCHITECTURES[archs[0]]
    else:
        kind = raw.get("model_type")
        if kind not in ARCHITECTURES.values():
            raise _refuse("model_type", kind, f"depthlab reads {supported}")
    if raw.get("model_type", kind) != kind:
        raise _refuse("model_type", raw["model_type"], f"architectures says {kind}")
    return kind


def _rope_theta(raw: dict[str, Any]) -> float:
    """rope_theta from the newer `rope_parameters` dict or the older `rope_theta`/`rope_scaling`.
    Both dicts are checked even when the first gives the theta: a config may carry both,
    and a llama3 `rope_scaling` beside a plain `rope_parameters` must not be dropped."""
    theta = None
    for key in ("rope_parameters", "rope_scaling"):
        params = raw.get(key)
        if params is None:
            continue
        if not isinstance(params, dict):
            raise _refuse(key, params, "expected an object")
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type != "default":
            raise _refuse(f"{key}.rope_type", rope_type,
                          "depthlab implements plain RoPE (rope_type 'default') only")
        if params.get("partial_rotary_factor", 1.0) != 1.0:
            raise _refuse(f"{key}.partial_rotary_factor", params["partial_rotary_factor"],
                          "depthlab rotates the whole head")
        if "rope_theta" in params and theta is None:
            theta = params["rope_theta"]
    theta = raw.get("rope_theta", DEFAULT_ROPE_THETA) if theta is None else theta
    if isinstance(theta, bool) or not isinstance(theta, (int, float)):
        raise _refuse("rope_theta", theta, "expected a number")
    return float(theta)


def _check_refused(raw: dict[str, Any], kind: str) -> None:
    if raw.get("hidden_act", "silu") != "silu":
        raise _refuse("hidden_act", raw["hidden_act"], "depthlab's SwiGLU uses silu")
    if raw.get("partial_rotary_factor", 1.0) != 1.0:
        raise _refuse("partial_rotary_factor", raw["partial_rotary_factor"],
                      "depthlab rotates the whole head")
    for name in _REFUSED_FIELDS:
        if name in raw and raw[name] not in _OFF:
            raise _refuse(name, raw[name], "depthlab's model has no equivalent")
    if raw.get("use_sliding_window"):
        raise _refuse("use_sliding_window", True, "depthlab attends to the whole context")
    if kind == "llama" and raw.get("sliding_window") is not None:
        raise _refuse("sliding_window", raw["sliding_window"], "depthlab attends to the whole context")
    layer_types = raw.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        other = next(t for t in layer_types if t != "full_attention")
        raise _refuse("layer_types", other, "depthlab attends to the whole context in every layer")


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _refuse(name, value, "expected a positive integer")
    return value


def model_config_from_hf(raw: dict[str, Any]) -> tuple[ModelConfig, str]:
    """Our ModelConfig for a Hugging Face config.json, and the architecture it came from."""
    kind = architecture_of(raw)
    _check_refused(raw, kind)

    def get(name: str) -> Any:
        return raw.get(name, _DEFAULTS[kind].get(name))

    d_model, n_heads = _int("hidden_size", get("hidden_size")), _int(
        "num_attention_heads", get("num_attention_heads"))
    # Missing: the class default; null: one K/V head per query head (as Transformers does).
    n_kv = get("num_key_value_heads") or n_heads
    head_dim = get("head_dim") or d_model // n_heads
    bias = False
    if kind == "llama":
        attn_bias, mlp_bias = bool(get("attention_bias")), bool(get("mlp_bias"))
        if attn_bias != mlp_bias:
            field = "attention_bias" if attn_bias else "mlp_bias"
            raise _refuse(field, True, "depthlab has biases on every linear or on q/k/v only; "
                          "Llama needs attention_bias and mlp_bias both true or both false")
        bias = attn_bias
    if kind == "qwen3" and get("attention_bias"):
        raise _refuse("attention_bias", True, "Qwen3's o_proj bias has no depthlab equivalent "
                      "without MLP biases")
    model = ModelConfig(
        vocab_size=_int("vocab_size", get("vocab_size")),
        context_len=_int("max_position_embeddings", get("max_position_embeddings")),
        n_layers=_int("num_hidden_layers", get("num_hidden_layers")),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=_int("num_key_value_heads", n_kv),
        head_dim=_int("head_dim", head_dim),
        d_ff=_int("intermediate_size", get("intermediate_size")),
        ffn="swiglu",
        norm="rmsnorm",
        norm_eps=float(get("rms_norm_eps")),
        placement="pre",
        residual="plain",
        final_norm=True,
        qk_norm=kind == "qwen3",
        position="rope",
        rope_theta=_rope_theta(raw),
        bias=bias,
        qkv_bias=kind == "qwen2",
        tie_embeddings=bool(get("tie_word_embeddings")),
        init_std=float(get("initializer_range")),
        scaled_init=False,
    )
    return model, kind


def run_config_from_hf(raw: dict[str, Any], has_tokenizer: bool) -> tuple[Config, str]:
    """A whole run Config (model from the checkpoint, data/train defaults that validate)."""
    model, kind = model_config_from_hf(raw)
    base = Config(model=model)
    data = replace(base.data, tokenizer="bpe" if has_tokenizer else base.data.tokenizer)
    train = replace(TrainConfig(), seq_len=min(TrainConfig().seq_len, model.context_len))
    try:
        return validate(Config(model=model, data=data, train=train)), kind
    except UserError as e:
        raise UserError(f"config.json maps to an invalid depthlab config: {e}") from None


# ---- export -----------------------------------------------------------------------------

# Switches with no Hugging Face (Llama/Qwen2/Qwen3) equivalent: (field, allowed value, why).
_EXPORTABLE = (
    ("residual", "plain", "Llama and Qwen add every write to the stream unscaled"),
    ("placement", "pre", "Llama and Qwen normalise before each sublayer"),
    ("norm", "rmsnorm", "Llama and Qwen use RMSNorm with scale w"),
    ("attn_gate", False, "Llama and Qwen have no attention output gate"),
    ("ffn", "swiglu", "Llama and Qwen use a SwiGLU FFN"),
    ("ffn_clamp", None, "Llama and Qwen do not clamp the SwiGLU inputs"),
    ("position", "rope", "Llama and Qwen use RoPE"),
    ("final_norm", True, "Llama and Qwen normalise before the LM head"),
    ("norm_scale", "none", "Llama and Qwen do not scale the norms by depth"),
    ("value_residual", False, "Llama and Qwen attend over each layer's own values"),
)


def hf_config_from_model(m: ModelConfig) -> dict[str, Any]:
    """config.json for a model: Llama, or Qwen2 with qkv_bias, or Qwen3 with qk_norm."""
    for name, allowed, why in _EXPORTABLE:
        if getattr(m, name) != allowed:
            raise UserError(f"model.{name}={_js(getattr(m, name))} has no Hugging Face "
                            f"equivalent ({why}); only runs with model.{name}={_js(allowed)} export")
    if m.qk_norm and (m.bias or m.qkv_bias):
        name = "bias" if m.bias else "qkv_bias"
        raise UserError(f"model.{name}=true with model.qk_norm=true has no Hugging Face "
                        "equivalent (Qwen3 has QK-norm but no q/k/v-only or MLP biases)")
    if m.bias:
        kind = "llama"  # attention_bias + mlp_bias = a bias on every linear but the LM head
    elif m.qk_norm:
        kind = "qwen3"
    elif m.qkv_bias:
        kind = "qwen2"
    else:
        kind = "llama"
    arch = next(a for a, k in ARCHITECTURES.items() if k == kind)
    out: dict[str, Any] = {
        "architectures": [arch],
        "model_type": kind,
        "vocab_size": m.vocab_size,
        "hidden_size": m.d_model,
        "intermediate_size": m.ffn_hidden,
        "num_hidden_layers": m.n_layers,
        "num_attention_heads": m.n_heads,
        "num_key_value_heads": m.kv_heads,
        "head_dim": m.head_size,
        "hidden_act": "silu",
        "max_position_embeddings": m.context_len,
        "initializer_range": m.init_std,
        "rms_norm_eps": m.norm_eps,
        "tie_word_embeddings": m.tie_embeddings,
        # Both spellings: Transformers >= 5 reads rope_parameters, older versions rope_theta.
        "rope_theta": m.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": m.rope_theta},
        "attention_dropout": 0.0,
        "use_cache": True,
        "torch_dtype": "float32",
        "bos_token_id": None,
        "eos_token_id": None,
    }
    if kind == "llama":
        out.update(attention_bias=m.bias, mlp_bias=m.bias, pretraining_tp=1)
    else:
        out.update(use_sliding_window=False, sliding_window=None,
                   max_window_layers=m.n_layers)
    if kind == "qwen3":
        out["attention_bias"] = False
    return out
