"""The one Hugging Face mapping: config.json fields and tensor names <-> ModelConfig and ours.

One table per model family (the idea of torchtitan's `StateDictAdapter`): every
config.json field with the ModelConfig field it becomes, the value Transformers'
config class assumes when the field is missing, and what null means; the switches
the family fixes; the fields whose values the model does not implement; the tensor
names. Import (`hf import`, `hf import-gguf`), export, anatomy, the CLI help and the
README's table are all read from here, so they cannot disagree.

Two purposes read a config.json: IMPORT builds a model that must compute what the
checkpoint computes, so every refusal applies; ANATOMY only counts parameters and
shapes, so it also reads families depthlab cannot run (GPT-2, Mistral, the text part
of a hybrid) and skips the refusals that change the computation but no parameter
(RoPE scaling, sliding windows, the activation).

Only `depthlab.config` and `depthlab.errors` are imported: this is the bottom of `hf/`.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from depthlab.config import ModelConfig
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

_LLAMA_SWITCHES = (
    Switch("residual", "plain", "Llama and Qwen add every write to the stream unscaled"),
    Switch("placement", "pre", "Llama and Qwen normalise before each sublayer"),
    Switch("norm", "rmsnorm", "Llama and Qwen use RMSNorm with scale w"),
    Switch("attn_gate", False, "Llama and Qwen have no attention output gate"),
    Switch("ffn", "swiglu", "Llama and Qwen use a SwiGLU FFN"),
    Switch("ffn_clamp", None, "Llama and Qwen do not clamp the SwiGLU inputs"),
    Switch("position", "rope", "Llama and Qwen use RoPE"),
    Switch("final_norm", True, "Llama and Qwen normalise before the LM head"),
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
        "qwen3_5", ("qwen3_5", "qwen3_5_text"), None, (
            *_llama_fields(4, 256, 32768),
            Field("attn_output_gate", "attn_gate", bool, True),
        ),
        (*(s for s in _LLAMA_SWITCHES if s.ours not in ("norm", "attn_gate")),
         Switch("norm", "rmsnorm_zero_centered", "Qwen3.5 scales by (1 + w)"),
         Switch("qk_norm", True, "Qwen3.5 has QK-norm")),
        nested="text_config",
        note="The full-attention layers of the hybrid trunk; probes/hybrid.py counts the "
        "linear-attention layers, the vision tower and the MTP layers"),
)}

HYBRID = "qwen3_5"
HYBRID_TYPES = FAMILIES[HYBRID].model_types
EXPORT_ORDER = ("qwen3", "qwen2", "llama")  # the first whose `selects` the model has
_BY_ARCHITECTURE = {f.architecture: f for f in FAMILIES.values() if f.architecture}
_BY_MODEL_TYPE = {t: f for f in FAMILIES.values() for t in f.model_types}


# ---- reading ----------------------------------------------------------------------------

def _js(value: Any) -> str:
    """A value as config.json and `--set` spell it (true, null, "llama3")."""
    return json.dumps(value)


def refuse(field_name: str, value: Any, why: str) -> UserError:
    return UserError(f"config.json field {field_name}={_js(value)} is not supported: {why}")


def families_for(purpose: str) -> list[Family]:
    return [f for f in FAMILIES.values() if purpose == ANATOMY or f.weights]


def family_of(raw: dict[str, Any], purpose: str = IMPORT) -> Family:
    """The family from `architectures` (import) or `model_type` (either, when the other is
    missing), refused when depthlab does not read it for this purpose."""
    allowed = families_for(purpose)
    archs = raw.get("architectures")
    if archs and (purpose == IMPORT or "model_type" not in raw):
        supported = ", ".join(f.architecture for f in allowed if f.architecture)
        if not isinstance(archs, list) or len(archs) != 1 or archs[0] not in _BY_ARCHITECTURE:
            raise refuse("architectures", archs, f"depthlab reads {supported}")
        fam = _BY_ARCHITECTURE[archs[0]]
        if raw.get("model_type", fam.name) not in fam.model_types:
            raise refuse("model_type", raw["model_type"], f"architectures says {fam.name}")
        return fam
    kind = raw.get("model_type")
    fam = _BY_MODEL_TYPE.get(kind) if isinstance(kind, str) else None
    if fam is None or fam not in allowed:
        names = ", ".join(t for f in allowed for t in f.model_types)
        raise refuse("model_type", kind, f"depthlab reads {names}")
    return fam


def text_config(raw: dict[str, Any], fam: Family | None = None) -> dict[str, Any]:
    """The language model's fields: `text_config` of a multimodal config, else the config;
    the top-level tie_word_embeddings wins (Transformers ties at the top)."""
    nested = fam.nested if fam else "text_config"
    tc = raw.get(nested, raw) if nested else raw
    if not isinstance(tc, dict):
        raise UserError(f"config.json: {nested} must be an object")
    if tc is not raw and "tie_word_embeddings" in raw:
        tc = tc | {"tie_word_embeddings": raw["tie_word_embeddings"]}
    return tc


def rope_theta(raw: dict[str, Any], purpose: str = IMPORT) -> float:
    """rope_theta from the newer `rope_parameters` dict or the older `rope_theta`/`rope_scaling`.
    Both dicts are checked even when the first gives the theta: a config may carry both,
    and a llama3 `rope_scaling` beside a plain `rope_parameters` must not be dropped.
    Anatomy reads the theta and skips the checks (RoPE has no parameters)."""
    theta = None
    for key in ("rope_parameters", "rope_scaling"):
        params = raw.get(key)
        if params is None:
            continue
        if not isinstance(params, dict):
            raise refuse(key, params, "expected an object")
        rope_type = params.get("rope_type", params.get("type", "default"))
        if purpose == IMPORT and rope_type != "default":
            raise refuse(f"{key}.rope_type", rope_type,
                         "depthlab implements plain RoPE (rope_type 'default') only")
        if purpose == IMPORT and params.get("partial_rotary_factor", 1.0) != 1.0:
            raise refuse(f"{key}.partial_rotary_factor", params["partial_rotary_factor"],
                         "depthlab rotates the whole head")
        if "rope_theta" in params and theta is None:
            theta = params["rope_theta"]
    return raw.get("rope_theta", DEFAULT_ROPE_THETA) if theta is None else theta


def _value(f: Field, value: Any) -> Any:
    if f.kind is bool:
        return bool(value)
    if f.kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise refuse(f.hf, value, "expected a positive integer")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise refuse(f.hf, value, "expected a number")
    return float(value)


def model_config_from_hf(raw: dict[str, Any], purpose: str = IMPORT) -> tuple[ModelConfig, str]:
    """Our ModelConfig for a Hugging Face config.json, and the family it came from.

    IMPORT: the families with tensor names, every refusal. ANATOMY: every family, only
    the refusals that change the parameters; for a hybrid, the model its full-attention
    layers would make if every layer were one (`probes/hybrid.py` counts the real mix)."""
    fam = family_of(raw, purpose)
    tc = text_config(raw, fam)
    for r in fam.refusals:
        if r.hf in tc and (purpose == IMPORT or r.parameters) and not r.ok(tc[r.hf]):
            raise refuse(r.hf, tc[r.hf], r.why)
    values: dict[str, Any] = {s.ours: s.value for s in fam.switches}
    read_from: dict[str, tuple[str, Any]] = {}
    for f in fam.fields:
        value = rope_theta(tc, purpose) if f.hf == ROPE_FIELD else tc.get(f.hf, f.default)
        if value is None and f.null is not None:
            value = f.null(values)
        elif value is None:
            raise UserError(f"config.json field {f.hf} is missing (a {fam.name} config needs it)")
        value = _value(f, value)
        if f.ours in read_from and read_from[f.ours][1] != value:  # two fields, one switch
            first = read_from[f.ours][0]
            on = first if read_from[f.ours][1] else f.hf
            raise refuse(on, True, f"depthlab's model.{f.ours} needs {first} and {f.hf} "
                         "both true or both false")
        read_from[f.ours] = (f.hf, value)
        values[f.ours] = value
    return ModelConfig(**values), fam.name  # validated by its user: a run, or the anatomy


# ---- writing ----------------------------------------------------------------------------

def _export_refusal(m: ModelConfig, s: Switch) -> UserError:
    value = getattr(m, s.ours)
    return UserError(f"model.{s.ours}={_js(value)} has no Hugging Face equivalent ({s.why}); "
                     f"only runs with model.{s.ours}={_js(s.value)} export")


def export_family(m: ModelConfig) -> Family:
    """The family a model exports as: the first in EXPORT_ORDER whose `selects` it has;
    every switch that family fixes must then hold, or the first that does not is named."""
    fam = next(FAMILIES[n] for n in EXPORT_ORDER
               if all(getattr(m, k) == v for k, v in FAMILIES[n].selects.items()))
    for s in fam.switches:
        if s.exported and getattr(m, s.ours) != s.value:
            raise _export_refusal(m, s)
    return fam


def export_switches() -> list[str]:
    """The switches every exported family fixes to the same value (for the help); the
    others (qk_norm, qkv_bias, bias) choose among the families."""
    values: dict[str, set] = {}
    for name in EXPORT_ORDER:
        for s in FAMILIES[name].switches:
            if s.exported:
                values.setdefault(s.ours, set()).add(_js(s.value))
    return [k for k, v in values.items() if len(v) == 1 and all(
        any(s.ours == k for s in FAMILIES[n].switches) for n in EXPORT_ORDER)]


def hf_config_from_model(m: ModelConfig) -> dict[str, Any]:
    """config.json for a model: Llama, or Qwen2 with qkv_bias, or Qwen3 with qk_norm."""
    fam = export_family(m)
    out: dict[str, Any] = {"architectures": [fam.architecture], "model_type": fam.name,
                           "hidden_act": "silu"}
    for f in fam.fields:
        out[f.hf] = getattr(m, f.export or f.ours)
    # Both spellings: Transformers >= 5 reads rope_parameters, older versions rope_theta.
    out["rope_parameters"] = {"rope_type": "default", "rope_theta": m.rope_theta}
    out.update(attention_dropout=0.0, use_cache=True, torch_dtype="float32",
               bos_token_id=None, eos_token_id=None)
    out.update({k: v(m) if callable(v) else v for k, v in fam.written.items()})
    return out


# ---- tensor names -----------------------------------------------------------------------

def _swap_prefix(name: str, table: tuple[tuple[str, str], ...]) -> str | None:
    for ours, theirs in table:
        if name.startswith(ours):
            return theirs + name[len(ours):]
    return None


def hf_name(name: str, names: TensorNames = LLAMA_NAMES) -> str:
    """Our parameter name -> the Hugging Face tensor name (`blocks.0.attn.q_proj.weight`
    -> `model.layers.0.self_attn.q_proj.weight`). Every importable family uses Llama's."""
    if name.startswith("blocks."):
        _, index, rest = name.split(".", 2)
        mapped = _swap_prefix(rest, names.block)
        if mapped is not None:
            return f"{names.layer_prefix}{index}.{mapped}"
    else:
        mapped = _swap_prefix(name, names.top)
        if mapped is not None:
            return mapped
    raise UserError(f"parameter {name!r} has no Hugging Face name")


def gguf_to_hf_name(name: str, names: TensorNames = LLAMA_NAMES) -> str:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`; a name without a
    Llama equivalent comes back unchanged (the import then refuses it as having no place)."""
    stem, _, suffix = name.rpartition(".")
    top, block = dict(names.gguf_top), dict(names.gguf_block)
    if stem in top:
        return f"{top[stem]}.{suffix}"
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in block:
        return f"{names.layer_prefix}{parts[1]}.{block[parts[2]]}.{suffix}"
    return name


# ---- the table in words -----------------------------------------------------------------

ROPE_NEWER = "rope_parameters.rope_theta"  # Transformers >= 5; rope_theta at the top before


def _missing(f: Field) -> str:
    if f.default is not None:
        return _js(f.default)
    return "as null" if f.null is not None else "required"


def field_rows(fams: list[Family] | None = None) -> list[tuple[str, str, str, str, str]]:
    """(config.json field, model.<field>, missing means, null means, families): one row per
    field, the families that spell it alike merged, their defaults side by side."""
    rows: dict[tuple[str, str], tuple[str, dict[str, list[str]]]] = {}
    for fam in fams or list(FAMILIES.values()):
        for f in fam.fields:
            null, by_default = rows.setdefault((f.hf, f.ours), (f.null_means, {}))
            by_default.setdefault(_missing(f), []).append(fam.name)
    out = []
    for (hf, ours), (null, by_default) in rows.items():
        names = [n for n in FAMILIES if any(n in group for group in by_default.values())]
        missing = "; ".join(f"{v} ({', '.join(group)})" if len(by_default) > 1 else v
                            for v, group in by_default.items())
        out.append((hf, f"model.{ours}", missing, null, ", ".join(names)))
    return out


def markdown_table() -> str:
    """The README's table (tests/test_hf_mapping.py checks the README holds exactly this)."""
    lines = ["| config.json | depthlab | missing | null | families |", "|---|---|---|---|---|"]
    for hf, ours, missing, null, names in field_rows():
        hf_cell = f"`{hf}`" + (f" (or `{ROPE_NEWER}`)" if hf == ROPE_FIELD else "")
        lines.append(f"| {hf_cell} | `{ours}` | {missing} | {null} | {names} |")
    lines.append("")
    for fam in FAMILIES.values():
        fixed = ", ".join(f"{s.ours}={_js(s.value)}" for s in fam.switches)
        what = fam.architecture or "anatomy only"
        lines.append(f"- `{fam.name}` ({what}): {fixed}" + (f". {fam.note}" if fam.note else ""))
    return "\n".join(lines)


def help_text(purpose: str) -> str:
    """The families and fields one purpose reads, for `depthlab hf import --help` and
    `depthlab anatomy --help`."""
    fams = families_for(purpose)
    lines = ["config.json fields (missing: Transformers' class default):"]
    for hf, ours, missing, null, _names in field_rows(fams):
        spelled = f"{ROPE_NEWER} or {hf}" if hf == ROPE_FIELD else hf
        lines.append(f"  {spelled} -> {ours} (missing: {missing}"
                     + (f"; null: {null})" if null else ")"))
    lines.append("families:")
    for fam in fams:
        fixed = ", ".join(f"{s.ours}={_js(s.value)}" for s in fam.switches)
        where = f"{fam.architecture}" if fam.architecture else f"model_type {fam.name}"
        lines.append(textwrap.fill(
            f"{fam.name} ({where}{', its ' + fam.nested if fam.nested else ''}): {fixed}",
            width=92, initial_indent="  ", subsequent_indent="    "))
    return "\n".join(lines)
