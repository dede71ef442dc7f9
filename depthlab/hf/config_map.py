"""Hugging Face `config.json` <-> ModelConfig, both directions, by the one mapping
(`depthlab/hf/mapping.py`); and a whole run Config around an imported model."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from depthlab.config import (
    MAX_INT,
    PATTERN_LETTERS,
    Config,
    ModelConfig,
    TrainConfig,
    validate,
)
from depthlab.errors import UserError
from depthlab.hf.mapping import (
    BY_ARCHITECTURE,
    BY_MODEL_TYPE,
    DEFAULT_ROPE_THETA,
    EXPORT_ORDER,
    FAMILIES,
    HF_LAYER_TYPES,
    IMPORT,
    PARTIAL_ROPE_FIELD,
    ROPE_FIELD,
    Family,
    Field,
    Switch,
    as_json,
    families_for,
    refuse,
)


def family_of(raw: dict[str, Any], purpose: str = IMPORT) -> Family:
    """The family from `architectures` (import) or `model_type` (either, when the other is
    missing), refused when depthlab does not read it for this purpose."""
    allowed = families_for(purpose)
    archs = raw.get("architectures")
    if archs and (purpose == IMPORT or "model_type" not in raw):
        supported = ", ".join(f.architecture for f in allowed if f.architecture)
        if not isinstance(archs, list) or len(archs) != 1 or archs[0] not in BY_ARCHITECTURE:
            raise refuse("architectures", archs, f"depthlab reads {supported}")
        fam = BY_ARCHITECTURE[archs[0]]
        if raw.get("model_type", fam.name) not in fam.model_types:
            raise refuse("model_type", raw["model_type"], f"architectures says {fam.name}")
        return fam
    kind = raw.get("model_type")
    fam = BY_MODEL_TYPE.get(kind) if isinstance(kind, str) else None
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


FULL, LINEAR = "full_attention", "linear_attention"


def layer_types(tc: dict[str, Any]) -> list[str]:
    """Each trunk layer's kind, as transformers derives it: `layer_types` when given, else
    full attention every `full_attention_interval` layers (default 4), linear otherwise."""
    n = tc.get("num_hidden_layers")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise refuse("num_hidden_layers", n, "expected a positive integer")
    kinds = tc.get("layer_types")
    if kinds is None:
        every = tc.get("full_attention_interval", 4)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise refuse("full_attention_interval", every, "expected a positive integer")
        return [LINEAR if (i + 1) % every else FULL for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n or not set(kinds) <= {FULL, LINEAR}:
        raise UserError(f"config.json: layer_types must list {n} entries, each {FULL!r} or "
                        f"{LINEAR!r}")
    return list(kinds)


def mixer_fields(kinds: list[str]) -> dict[str, Any]:
    """model.mixer and model.layer_pattern for transformers' layer kinds: the shortest
    period of the kinds (its length divides the layers), one letter per layer."""
    theirs = {v: k for k, v in HF_LAYER_TYPES.items()}
    ours = [theirs[k] for k in kinds]
    if set(ours) == {"attention"}:
        return {"mixer": "attention", "layer_pattern": None}
    if set(ours) == {"gated_deltanet"}:
        return {"mixer": "gated_deltanet", "layer_pattern": None}
    n = len(ours)
    period = next(p for p in range(1, n + 1)
                  if n % p == 0 and all(ours[i] == ours[i % p] for i in range(n)))
    letter = {kind: key for key, kind in PATTERN_LETTERS.items()}
    return {"mixer": "gated_deltanet",
            "layer_pattern": "".join(letter[k] for k in ours[:period])}


def rope_field(tc: dict[str, Any], key: str, default: Any) -> Any:
    """A RoPE field that transformers >= 5 keeps in `rope_parameters` (partial_rotary_factor)
    and older configs at the top level."""
    params = tc.get("rope_parameters")
    if isinstance(params, dict) and key in params:
        return params[key]
    return tc.get(key, default)


def rope_theta(raw: dict[str, Any], purpose: str = IMPORT, partial: bool = False) -> float:
    """rope_theta from the newer `rope_parameters` dict or the older `rope_theta`/`rope_scaling`.
    Both dicts are checked even when the first gives the theta: a config may carry both,
    and a llama3 `rope_scaling` beside a plain `rope_parameters` must not be dropped.
    Anatomy reads the theta and skips the checks (RoPE has no parameters). partial: the
    family reads partial_rotary_factor as a field of its own (model.rope_fraction)."""
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
        if purpose == IMPORT and not partial and params.get("partial_rotary_factor", 1.0) != 1.0:
            raise refuse(f"{key}.partial_rotary_factor", params["partial_rotary_factor"],
                         "depthlab rotates the whole head")
        if "rope_theta" in params and theta is None:
            theta = params["rope_theta"]
    return raw.get("rope_theta", DEFAULT_ROPE_THETA) if theta is None else theta


def _value(f: Field, value: Any) -> Any:
    """A field's JSON value, its type checked as Transformers' config classes declare it:
    "yes" is not a boolean, "32" not an integer, true not a number."""
    if f.kind is bool:
        if not isinstance(value, bool):
            raise refuse(f.hf, value, "expected true or false (a JSON boolean)")
        return value
    if f.kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise refuse(f.hf, value, "expected a positive integer")
        if value > MAX_INT:  # what every integer of depthlab's config holds
            raise refuse(f.hf, value, f"expected at most {MAX_INT:,}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise refuse(f.hf, value, "expected a finite number")
    return float(value)


def model_config_from_hf(raw: dict[str, Any], purpose: str = IMPORT) -> tuple[ModelConfig, str]:
    """Our ModelConfig for a Hugging Face config.json, and the family it came from.

    IMPORT: the families with tensor names, every refusal. ANATOMY: every family, only
    the refusals that change the parameters. A hybrid's layer kinds become model.mixer
    and model.layer_pattern (`mixer_fields`)."""
    fam = family_of(raw, purpose)
    tc = text_config(raw, fam)
    for r in fam.refusals:
        if r.hf in tc and (purpose == IMPORT or r.parameters) and not r.ok(tc[r.hf]):
            raise refuse(r.hf, tc[r.hf], r.why)
    values: dict[str, Any] = {s.ours: s.value for s in fam.switches}
    read_from: dict[str, tuple[str, Any]] = {}
    partial = any(f.hf == PARTIAL_ROPE_FIELD for f in fam.fields)
    for f in fam.fields:
        if f.hf == ROPE_FIELD:
            value = rope_theta(tc, purpose, partial)
        elif f.hf == PARTIAL_ROPE_FIELD:
            value = rope_field(tc, f.hf, f.default)
        else:
            value = tc.get(f.hf, f.default)
        if value is None and f.null is not None:
            value = f.null(values)
        elif value is None:
            raise UserError(f"config.json field {f.hf} is missing (a {fam.name} config needs it)")
        given, value = value, _value(f, value)
        if f.hf == PARTIAL_ROPE_FIELD and not 0 < value <= 1:
            raise refuse(f.hf, given, "expected a number in (0, 1], the share of each head "
                         "RoPE rotates")
        if f.ours in read_from and read_from[f.ours][1] != value:  # two fields, one switch
            first = read_from[f.ours][0]
            on = first if read_from[f.ours][1] else f.hf
            raise refuse(on, True, f"depthlab's model.{f.ours} needs {first} and {f.hf} "
                         "both true or both false")
        read_from[f.ours] = (f.hf, value)
        values[f.ours] = value
    if fam.mixers:
        values.update(mixer_fields(layer_types(tc)))
    return ModelConfig(**values), fam.name  # validated by its user: a run, or the anatomy


# ---- writing ----------------------------------------------------------------------------

def _export_refusal(m: ModelConfig, s: Switch) -> UserError:
    value = getattr(m, s.ours)
    return UserError(f"model.{s.ours}={as_json(value)} has no Hugging Face equivalent ({s.why}); "
                     f"only runs with model.{s.ours}={as_json(s.value)} export")


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
                values.setdefault(s.ours, set()).add(as_json(s.value))
    return [k for k, v in values.items() if len(v) == 1 and all(
        any(s.ours == k for s in FAMILIES[n].switches) for n in EXPORT_ORDER)]


def hf_config_from_model(m: ModelConfig) -> dict[str, Any]:
    """config.json for a model: Llama, or Qwen2 with qkv_bias, or Qwen3 with qk_norm."""
    fam = export_family(m)
    out: dict[str, Any] = {"architectures": [fam.architecture], "model_type": fam.model_types[0],
                           "hidden_act": "silu"}
    for f in fam.fields:
        out[f.hf] = getattr(m, f.export or f.ours)
    # Both spellings: Transformers >= 5 reads rope_parameters, older versions rope_theta.
    out["rope_parameters"] = {"rope_type": "default", "rope_theta": m.rope_theta}
    if PARTIAL_ROPE_FIELD in out:
        out["rope_parameters"][PARTIAL_ROPE_FIELD] = out[PARTIAL_ROPE_FIELD]
    out.update(attention_dropout=0.0, use_cache=True, torch_dtype="float32",
               bos_token_id=None, eos_token_id=None)
    out.update({k: v(m) if callable(v) else v for k, v in fam.written.items()})
    return out



def run_config_from_hf(raw: dict[str, Any], has_tokenizer: bool) -> tuple[Config, str]:
    """A run Config (model from the checkpoint, data/train defaults that validate) and the
    family the checkpoint belongs to."""
    model, kind = model_config_from_hf(raw, IMPORT)
    base = Config(model=model)
    data = replace(base.data, tokenizer="bpe" if has_tokenizer else base.data.tokenizer)
    train = replace(TrainConfig(), seq_len=min(TrainConfig().seq_len, model.context_len))
    try:
        return validate(Config(model=model, data=data, train=train)), kind
    except UserError as e:
        raise UserError(f"config.json maps to an invalid depthlab config: {e}") from None
