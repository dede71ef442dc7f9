"""The one Hugging Face mapping: config.json fields and tensor names <-> ModelConfig and ours.

One table per model family (the idea of torchtitan's `StateDictAdapter`): every
config.json field with the ModelConfig field it becomes, the value Transformers'
config class assumes when the field is missing, and what null means; the switches
the family fixes; the fields whose values the model does not implement; the tensor
names. Import (`hf import`, `hf import-gguf`), export, anatomy, the CLI help and the
table in docs/real-models.md are all read from here, so they cannot disagree: `config_map.py` reads
and writes config.json by it, `weights.py` renames tensors by it, `mapping_doc.py`
writes it out for the help and that page.

Two purposes read a config.json: IMPORT builds a model that must compute what the
checkpoint computes, so every refusal applies; ANATOMY only counts parameters and
shapes, so it also reads families depthlab cannot run (GPT-2, Mistral, the text part
of a hybrid) and skips the refusals that change the computation but no parameter
(RoPE scaling, sliding windows, the activation).

Only `depthlab.errors` is imported: this is the bottom of `hf/`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from depthlab.errors import UserError

IMPORT, ANATOMY = "import", "anatomy"
DEFAULT_ROPE_THETA = 10000.0  # every family's class default (rope_parameters absent)


@dataclass(frozen=True)
class Field:
    """One config.json field <-> one ModelConfig field."""

    hf: str
    ours: str
    kind: type  # int (positive), float or bool
    default: Any = None  # Transformers' class default; None: the field is required
    null: Callable[[dict[str, Any]], Any] | None = None  # null/missing -> from the fields read so far
    null_means: str = ""  # the same, in words
    export: str = ""  # the ModelConfig attribute written on export (a resolved property); "" = ours
    gguf: str = ""  # llama.cpp's metadata key, after "llama."


@dataclass(frozen=True)
class Refusal:
    """A field whose value changes what the model computes in a way depthlab does not."""

    hf: str
    ok: Callable[[Any], bool]
    why: str
    parameters: bool = False  # True: it also changes the parameters, so anatomy refuses it too


@dataclass(frozen=True)
class Switch:
    """A ModelConfig switch the family fixes, and why (the export's refusal names it)."""

    ours: str
    value: Any
    why: str
    exported: bool = True  # False: set on import only (the init rule does not change a forward)


@dataclass(frozen=True)
class TensorNames:
    """Our parameter name prefixes -> a family's tensor name prefixes, both directions."""

    top: tuple[tuple[str, str], ...]
    block: tuple[tuple[str, str], ...]  # inside block N, after `layer_prefix`N.
    layer_prefix: str = "model.layers."
    # a multimodal checkpoint's text model: its names under this prefix instead of "model."
    # (model.language_model.layers.3...), and the tensors of the rest (the vision tower, the
    # multi-token-prediction layers), which the import leaves out and says so
    nested_prefix: str = ""
    left_out: tuple[str, ...] = ()
    gguf_top: tuple[tuple[str, str], ...] = ()  # llama.cpp's names -> the family's
    gguf_block: tuple[tuple[str, str], ...] = ()  # inside blk.N.


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    architecture: str | None  # the *ForCausalLM class import/export use; None: anatomy only
    fields: tuple[Field, ...]
    switches: tuple[Switch, ...]
    refusals: tuple[Refusal, ...] = ()
    selects: dict[str, Any] = field(default_factory=dict)  # export: a model with these is this family
    written: dict[str, Any] = field(default_factory=dict)  # export: constants (callables: of the model)
    weights: TensorNames | None = None  # None: no tensor names, so not importable
    nested: str = ""  # the text model's fields sit under this key (multimodal configs)
    mixers: bool = False  # layer_types / full_attention_interval -> model.mixer, layer_pattern
    architectures: tuple[str, ...] = ()  # more classes whose checkpoints hold its text model
    note: str = ""


# ---- the fields -------------------------------------------------------------------------

def _llama_fields(kv_default: int | None, head_dim_default: int | None,
                  context_default: int) -> tuple[Field, ...]:
    """The fields every Llama-style family (llama, mistral, qwen2, qwen3, the hybrids' text
    part) spells the same way; only three class defaults differ."""
    return (
        Field("vocab_size", "vocab_size", int, gguf="vocab_size"),
        Field("max_position_embeddings", "context_len", int, context_default, gguf="context_length"),
        Field("num_hidden_layers", "n_layers", int, gguf="block_count"),
        Field("hidden_size", "d_model", int, gguf="embedding_length"),
        Field("num_attention_heads", "n_heads", int, gguf="attention.head_count"),
        Field("num_key_value_heads", "n_kv_heads", int, kv_default,
              null=lambda v: v["n_heads"], null_means="num_attention_heads (no grouping)",
              export="kv_heads", gguf="attention.head_count_kv"),
        Field("head_dim", "head_dim", int, head_dim_default,
              null=lambda v: v["d_model"] // v["n_heads"],
              null_means="hidden_size / num_attention_heads", export="head_size",
              gguf="attention.key_length"),
        Field("intermediate_size", "d_ff", int, export="ffn_hidden", gguf="feed_forward_length"),
        Field("rms_norm_eps", "norm_eps", float, 1e-6, gguf="attention.layer_norm_rms_epsilon"),
        Field("rope_theta", "rope_theta", float, DEFAULT_ROPE_THETA, gguf="rope.freq_base"),
        Field("tie_word_embeddings", "tie_embeddings", bool, False),
        Field("initializer_range", "init_std", float, 0.02),
    )


ROPE_FIELD = "rope_theta"  # also read from rope_parameters / rope_scaling: see `rope_theta`
PARTIAL_ROPE_FIELD = "partial_rotary_factor"  # also read from rope_parameters

_LLAMA_SWITCHES = (
    Switch("residual", "plain", "Llama and Qwen add every write, unscaled, to one stream"),
    Switch("placement", "pre", "Llama and Qwen normalise before each sublayer"),
    Switch("norm", "rmsnorm", "Llama and Qwen use RMSNorm with scale w"),
    Switch("attn_gate", False, "Llama and Qwen have no attention output gate"),
    Switch("ffn", "swiglu", "Llama and Qwen use a SwiGLU FFN"),
    Switch("ffn_clamp", None, "Llama and Qwen do not clamp the SwiGLU inputs"),
    Switch("position", "rope", "Llama and Qwen use RoPE"),
    Switch("final_norm", True, "Llama and Qwen normalise before the LM head"),
    Switch("norm_scale", "none", "Llama and Qwen do not scale the norms by depth"),
    Switch("value_residual", False, "Llama and Qwen attend over each layer's own values"),
    Switch("x0_mix", False, "Llama and Qwen do not mix the embedding back into each block's input"),
    Switch("backout", False, "Llama and Qwen do not subtract the middle stream before the head"),
    Switch("value_embeds", False, "Llama and Qwen have no value embeddings"),
    Switch("smear", False, "Llama and Qwen do not mix the previous token's embedding in"),
    Switch("unet_skips", False, "Llama and Qwen have no skips between mirrored blocks"),
    Switch("logit_softcap", None, "Llama and Qwen do not cap the logits"),
    Switch("mixer", "attention", "Llama and Qwen mix tokens by softmax attention in every layer"),
    Switch("rope_fraction", 1.0, "Llama and Qwen rotate the whole head"),
    Switch("scaled_init", False, "Transformers initialises every linear with the same std",
           exported=False),
)
_QWEN3_BIASES = "Qwen3 has QK-norm but no q/k/v-only or MLP biases"

_OFF = (None, False, 0, 1, 1.0, [], {})


def _off(value: Any) -> bool:
    return value in _OFF


# Fields of other architectures that a Llama-style config may carry; any "on" value is refused.
_DENSE_REFUSALS = (
    *(Refusal(name, _off, "depthlab's blocks have one dense FFN", parameters=True)
      for name in ("num_experts", "num_local_experts", "moe_intermediate_size",
                   "num_experts_per_tok", "decoder_sparse_step", "shared_expert_intermediate_size")),
    Refusal("quantization_config", _off, "depthlab's model has no equivalent"),
    *(Refusal(name, _off, "depthlab's model has no equivalent")
      for name in ("attn_logit_softcapping", "final_logit_softcapping", "logits_scaling",
                   "embedding_multiplier", "residual_multiplier", "attention_multiplier")),
    Refusal("hidden_act", lambda v: v == "silu", "depthlab's SwiGLU uses silu"),
    Refusal("partial_rotary_factor", lambda v: v == 1.0, "depthlab rotates the whole head"),
    Refusal("use_sliding_window", lambda v: not v, "depthlab attends to the whole context"),
    Refusal("layer_types", lambda v: all(t == "full_attention" for t in v or []),
            "depthlab attends to the whole context in every layer"),
)
# Llama and Mistral window whenever sliding_window is set; Qwen only with use_sliding_window.
_NO_WINDOW = Refusal("sliding_window", lambda v: v is None, "depthlab attends to the whole context")
_QWEN_WRITTEN = {"use_sliding_window": False, "sliding_window": None,
                 "max_window_layers": lambda m: m.n_layers}

LLAMA_NAMES = TensorNames(
    top=(("embed_tokens.", "model.embed_tokens."), ("final_norm.", "model.norm."),
         ("lm_head.", "lm_head.")),
    block=(("attn_norm_in.", "input_layernorm."), ("mlp_norm_in.", "post_attention_layernorm."),
           ("attn.", "self_attn."), ("mlp.", "mlp.")),
    # llama.cpp's GGUF tensor names -> Hugging Face's (gguf-py/gguf/tensor_mapping.py).
    gguf_top=(("token_embd", "model.embed_tokens"), ("output_norm", "model.norm"),
              ("output", "lm_head")),
    gguf_block=(("attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm"),
                ("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
                ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
                ("ffn_down", "mlp.down_proj")),
)

# Qwen3.5: Llama's names, and a Gated DeltaNet layer's under linear_attn (ours: attn, the
# mixer slot of every block), matched before attention's self_attn.
DELTANET_TENSORS = ("in_proj_", "conv1d.", "A_log", "dt_bias", "norm.", "out_proj.")
QWEN3_5_NAMES = TensorNames(
    top=LLAMA_NAMES.top,
    block=(("attn_norm_in.", "input_layernorm."), ("mlp_norm_in.", "post_attention_layernorm."),
           *((f"attn.{t}", f"linear_attn.{t}") for t in DELTANET_TENSORS),
           ("attn.", "self_attn."), ("mlp.", "mlp.")),
    nested_prefix="model.language_model.", left_out=("model.visual.", "mtp."))
# transformers' layer_types entries for our mixers
HF_LAYER_TYPES = {"attention": "full_attention", "gated_deltanet": "linear_attention"}

FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family(
        "llama", ("llama",), "LlamaForCausalLM", (
            *_llama_fields(None, None, 2048),
            Field("attention_bias", "bias", bool, False),
            Field("mlp_bias", "bias", bool, False),
        ),
        (*_LLAMA_SWITCHES, Switch("qk_norm", False, "Llama has no QK-norm")),
        (*_DENSE_REFUSALS, _NO_WINDOW),
        written={"pretraining_tp": 1}, weights=LLAMA_NAMES,
        note="SmolLM2, TinyLlama, DeepSeek-LLM; model.bias needs attention_bias and mlp_bias "
        "both true or both false"),
    Family(
        "qwen2", ("qwen2",), "Qwen2ForCausalLM", _llama_fields(32, None, 32768),
        (*_LLAMA_SWITCHES, Switch("qk_norm", False, "Qwen2 has no QK-norm"),
         Switch("qkv_bias", True, "Qwen2 has biases on q/k/v"),
         Switch("bias", False, "Qwen2 has biases on q/k/v only")),
        _DENSE_REFUSALS, selects={"qkv_bias": True, "bias": False},
        written=_QWEN_WRITTEN, weights=LLAMA_NAMES, note="Qwen2 and Qwen2.5"),
    Family(
        "qwen3", ("qwen3",), "Qwen3ForCausalLM", _llama_fields(32, 128, 32768),
        (*_LLAMA_SWITCHES, Switch("qk_norm", True, "Qwen3 has QK-norm"),
         Switch("qkv_bias", False, _QWEN3_BIASES), Switch("bias", False, _QWEN3_BIASES)),
        (*_DENSE_REFUSALS,
         Refusal("attention_bias", lambda v: not v,
                 "Qwen3's o_proj bias has no depthlab equivalent without MLP biases",
                 parameters=True)),
        selects={"qk_norm": True}, written={**_QWEN_WRITTEN, "attention_bias": False},
        weights=LLAMA_NAMES, note="Qwen3 dense"),
    Family(
        "mistral", ("mistral",), None, _llama_fields(8, None, 4096 * 32),
        (*_LLAMA_SWITCHES, Switch("qk_norm", False, "Mistral has no QK-norm"),
         Switch("qkv_bias", False, "Mistral has no biases"),
         Switch("bias", False, "Mistral has no biases")),
        (*_DENSE_REFUSALS, _NO_WINDOW)),
    Family(
        "gpt2", ("gpt2",), None, (
            Field("vocab_size", "vocab_size", int),
            Field("n_positions", "context_len", int, 1024),
            Field("n_layer", "n_layers", int),
            Field("n_embd", "d_model", int),
            Field("n_head", "n_heads", int),
            Field("n_inner", "d_ff", int, null=lambda v: 4 * v["d_model"],
                  null_means="4 n_embd", export="ffn_hidden"),
            Field("layer_norm_epsilon", "norm_eps", float, 1e-5),
            Field("tie_word_embeddings", "tie_embeddings", bool, True),
            Field("initializer_range", "init_std", float, 0.02),
        ),
        (Switch("residual", "plain", "GPT-2 adds every write unscaled"),
         Switch("placement", "pre", "GPT-2 normalises before each sublayer"),
         Switch("norm", "layernorm", "GPT-2 uses LayerNorm"),
         Switch("ffn", "gelu", "GPT-2's FFN is two matrices with GELU"),
         Switch("position", "learned", "GPT-2 learns a position table"),
         Switch("bias", True, "GPT-2 has a bias on every linear but the head"),
         Switch("final_norm", True, "GPT-2 normalises before the LM head (ln_f)"),
         Switch("scaled_init", True, "GPT-2 scales the output projections by 1/sqrt(2L)",
                exported=False))),
    Family(
        "qwen3_5", ("qwen3_5_text", "qwen3_5"), "Qwen3_5ForCausalLM", (
            *_llama_fields(4, 256, 32768),
            Field("partial_rotary_factor", "rope_fraction", float, 0.25),
            Field("linear_num_key_heads", "linear_key_heads", int, 16, export="linear_k_heads"),
            Field("linear_num_value_heads", "linear_value_heads", int, 32,
                  export="linear_v_heads"),
            Field("linear_key_head_dim", "linear_key_dim", int, 128, export="linear_k_dim"),
            Field("linear_value_head_dim", "linear_value_dim", int, 128, export="linear_v_dim"),
            Field("linear_conv_kernel_dim", "linear_conv_kernel", int, 4),
        ),
        (*(s for s in _LLAMA_SWITCHES if s.ours not in ("norm", "attn_gate", "mixer",
                                                         "rope_fraction")),
         Switch("norm", "rmsnorm_zero_centered", "Qwen3.5 scales by (1 + w)"),
         Switch("attn_gate", True, "Qwen3.5's q_proj always carries the sigmoid output gate"),
         Switch("qk_norm", True, "Qwen3.5 has QK-norm"),
         Switch("qkv_bias", False, "Qwen3.5 has no q/k/v-only biases"),
         Switch("bias", False, "Qwen3.5 has no biases")),
        (*(r for r in _DENSE_REFUSALS if r.hf not in ("partial_rotary_factor", "layer_types")),
         Refusal("attention_bias", lambda v: v is False,
                 "expected false (Qwen3.5's o_proj bias has no depthlab equivalent without "
                 "MLP biases)", parameters=True),
         Refusal("attn_output_gate", lambda v: v is not False,
                 "Transformers' Qwen3.5 always gates the attention output")),
        selects={"mixer": "gated_deltanet"},
        written={"attention_bias": False,
                 "layer_types": lambda m: [HF_LAYER_TYPES[k] for k in m.layer_kinds]},
        weights=QWEN3_5_NAMES, nested="text_config", mixers=True,
        architectures=("Qwen3_5ForConditionalGeneration",),
        note="Qwen3.5's text trunk: Gated DeltaNet (linear_attention) and gated attention "
        "layers by layer_types or full_attention_interval; a checkpoint with a vision tower "
        "imports its language model, leaving the vision tower and the MTP layers out"),
)}

HYBRID = "qwen3_5"
HYBRID_TYPES = FAMILIES[HYBRID].model_types
EXPORT_ORDER = ("qwen3_5", "qwen3", "qwen2", "llama")  # the first whose `selects` the model has
BY_ARCHITECTURE = {a: f for f in FAMILIES.values() if f.architecture
                   for a in (f.architecture, *f.architectures)}
BY_MODEL_TYPE = {t: f for f in FAMILIES.values() for t in f.model_types}


# ---- shared by the readers and writers -----------------------------------------------

def as_json(value: Any) -> str:
    """A value as config.json and `--set` spell it (true, null, "llama3")."""
    return json.dumps(value)


def refuse(field_name: str, value: Any, why: str) -> UserError:
    return UserError(f"config.json field {field_name}={as_json(value)} is not supported: {why}")


def families_for(purpose: str) -> list[Family]:
    return [f for f in FAMILIES.values() if purpose == ANATOMY or f.weights]
