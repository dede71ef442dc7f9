"""Model anatomy from a Hugging Face style config.json or a preset: shapes and parameters.

The evolution table's figures (FFN width as a multiple of d, FFN share of all
parameters, q_proj width with an output gate, residual writes) are computed here from
the shipped configs in `depthlab/data/configs/` and the presets, never typed in.
Parameter counts come from the model code itself, built on the `meta` device.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from depthlab.config import ModelConfig, validate_model
from depthlab.errors import UserError, read_json_object
from depthlab.hf.config_map import FULL, LINEAR, model_config_from_hf, text_config
from depthlab.hf.mapping import ANATOMY, HYBRID_TYPES
from depthlab.locales import text
from depthlab.presets import PRESETS, get_preset
from depthlab.probes.exact import init_scale_text
from depthlab.probes.exactnum import parse_decimal
from depthlab.probes.exactnum import text as exact_text
from depthlab.probes.hybrid import TEXT_ONLY, ffn_shares, mtp_layer, vision_tower
from depthlab.probes.stages import Shape, Stage, dense_stages, param_counts, q_width

CONFIG_PACKAGE = "depthlab.data"


def shipped_configs() -> list[str]:
    """Names of the configs shipped in depthlab/data/configs (file names without .json)."""
    folder = resources.files(CONFIG_PACKAGE) / "configs"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def load_hf_config(name_or_path: str) -> dict[str, Any]:
    """A shipped config by name, or any config.json path."""
    if name_or_path in shipped_configs():
        text = (resources.files(CONFIG_PACKAGE) / "configs" / f"{name_or_path}.json").read_text()
        return json.loads(text)
    return read_json_object(name_or_path, "no such config file; shipped configs: "
                            + ", ".join(shipped_configs()))


def model_of(raw: dict[str, Any]) -> ModelConfig:
    """The ModelConfig of a config.json, read by the one Hugging Face mapping
    (depthlab/hf/mapping.py) for anatomy: every family it knows, including GPT-2, Mistral
    and the hybrid trunk of Qwen3.5 (its layer kinds as model.layer_pattern)."""
    return model_config_from_hf(raw, ANATOMY)[0]


@dataclass(frozen=True)
class Anatomy:
    """A model's parameters and shapes, computed once for the CLI, the page and the docs.

    `to_json()` carries `stages`, the data flow in forward order, so the page draws it
    without counting anything itself. Each stage is

        {"key": "attention",            # see Stage.key; block stages repeat per layer
         "shape": [5, 768],             # its output for T tokens (batch omitted)
         "layers": 12,                  # blocks holding it; null outside the blocks
         "params_per_layer": 2362368,   # one block's; null outside the blocks
         "params": 28348416,            # all copies (layers x params_per_layer)
         "tied": false,                 # lm_head only: reads the embedding matrix
         "inner": [{"stage": "q_proj (query)", "shape": [5, 768]}, ...]}

    in the order embedding, positions, then per block attn_norm, attention
    (linear_attention beside it in a hybrid), attn_residual, ffn_norm, ffn,
    ffn_residual (a norm sits after its sublayer for placement post/output; a residual
    stage is absent with residual none, a norm stage with norm none), then final_norm,
    lm_head, and a hybrid checkpoint's vision and mtp (shape [], off the text path:
    the vision tower feeds image tokens in, the MTP layers predict a token further on).
    `positions` holds the learned
    table ([T, d]) or, for RoPE, no parameters and the angle table of a head
    ([T, rotated head dims / 2]). QK-norm scales count in attention, a residual
    variant's learned scalars (rezero) in *_residual. The `params` of all stages add up
    to `total_params`.
    """

    name: str
    source: str
    model: ModelConfig
    tokens: int
    stages: tuple[Stage, ...]
    params_by_component: dict[str, int]
    params_per_layer: dict[str, int]  # attention, ffn, norm, total (one block)
    total_params: int
    ffn_share: float  # FFN parameters / all parameters
    ffn_multiple: float  # d_ff / d
    q_proj_width: int  # with an output gate: 2 x heads x head size
    n_writes: int  # 2L
    init_std: float
    residual_init_std: float  # 0.02 / sqrt(2L), the GPT-2 rule
    share_definition: str = "FFN parameters / all parameters"
    text_ffn_share: float | None = None  # hybrids with a vision tower or MTP: FFN / text model
    text_share_definition: str = ""
    layer_kinds: tuple[tuple[str, int], ...] = ()  # hybrids: (kind, layers)

    @property
    def shapes(self) -> tuple[tuple[str, Shape], ...]:
        """The named tensors along the way (q_proj, scores, ffn hidden, writes, logits)."""
        return tuple(pair for st in self.stages
                     for pair in (*st.inner, *(((st.label, st.shape),) if st.label else ())))

    def to_json(self) -> dict:
        return {"kind": "anatomy", "name": self.name, "source": self.source,
                "model": asdict(self.model), "tokens": self.tokens,
                "stages": [st.to_json() for st in self.stages],
                "shapes": [{"stage": s, "shape": list(sh)} for s, sh in self.shapes],
                "params_by_component": dict(self.params_by_component),
                "params_per_layer": dict(self.params_per_layer),
                "total_params": self.total_params, "ffn_share": self.ffn_share,
                "ffn_multiple": self.ffn_multiple, "q_proj_width": self.q_proj_width,
                "attn_gate": self.model.attn_gate, "n_writes": self.n_writes,
                "init_std": self.init_std, "residual_init_std": self.residual_init_std,
                "share_definition": self.share_definition, "text_ffn_share": self.text_ffn_share,
                "text_share_definition": self.text_share_definition,
                "layer_kinds": dict(self.layer_kinds)}


@lru_cache(maxsize=128)
def anatomy(model: ModelConfig, tokens: int = 5, name: str = "", source: str = "") -> Anatomy:
    """Shapes at every stage for T tokens and parameters per stage, component and layer."""
    _check_tokens(tokens)
    m = validate_model(model)
    count = param_counts(m)
    by_component, total = count.by_component, count.total
    d = m.d_model
    ffn_params = by_component.get("ffn", 0)
    return Anatomy(
        name=name, source=source, model=m, tokens=tokens,
        stages=dense_stages(m, tokens, count.by_stage, totals=count.stage_totals),
        params_by_component=by_component, params_per_layer=count.block, total_params=total,
        ffn_share=ffn_params / total,
        ffn_multiple=m.ffn_hidden / d, q_proj_width=q_width(m), n_writes=m.n_writes,
        init_std=m.init_std,
        residual_init_std=replace(m, scaled_init=True, init_gain=1.0).out_proj_std,
    )


def _check_tokens(tokens: Any) -> None:
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 4096:
        raise UserError(f"tokens must be an integer between 1 and 4096, got {tokens!r}")


def anatomy_of(name_or_path: str, tokens: int = 5) -> Anatomy:
    """Anatomy of a shipped config name (see `shipped_configs()`) or a config.json path."""
    raw = load_hf_config(name_or_path)
    name, source = Path(name_or_path).stem, str(raw.get("_source", name_or_path))
    if raw.get("model_type") in HYBRID_TYPES:
        return hybrid_anatomy(raw, tokens, name, source)
    return anatomy(model_of(raw), tokens, name=name, source=source)


def hybrid_anatomy(raw: dict[str, Any], tokens: int, name: str, source: str) -> Anatomy:
    """A hybrid checkpoint: the shapes of its full-attention and Gated DeltaNet layers, and
    its parameters counted from depthlab's own model of its trunk built on the meta device
    (model.layer_pattern from its layer_types), with the vision tower and MTP layers each a
    component (and a stage) of their own (depthlab/probes/hybrid.py)."""
    _check_tokens(tokens)
    m = validate_model(model_of(raw))
    tc = text_config(raw)
    counts = dict(param_counts(m).by_component)
    if isinstance(raw.get("vision_config"), dict):
        counts["vision"] = vision_tower(raw["vision_config"])
    mtp = tc.get("mtp_num_hidden_layers", 0)
    if mtp:
        if isinstance(mtp, bool) or not isinstance(mtp, int) or mtp < 0:
            raise UserError(f"config.json: mtp_num_hidden_layers must be a whole number, "
                            f"got {mtp!r}")
        counts["mtp"] = mtp * mtp_layer(m)
    kinds = m.layer_kinds
    n_full, n_linear = kinds.count("attention"), kinds.count("gated_deltanet")
    share, text_share = ffn_shares(counts)
    mixer = m.mixer_params
    attn_layer, lin_layer = mixer["attention"], mixer["gated_deltanet"]  # with their norms
    qk_norms = attn_layer - (m.d_model * m.n_heads * m.head_size * (2 if m.attn_gate else 1)
                             + 2 * m.d_model * m.kv_heads * m.head_size
                             + m.n_heads * m.head_size * m.d_model)
    nv, dv = m.linear_v_heads, m.linear_v_dim
    key_dim = m.linear_k_heads * m.linear_k_dim
    T, d = tokens, m.d_model
    ffn = 3 * d * m.ffn_hidden
    per_stage = {"embedding": counts["embedding"], "attn_norm": d, "ffn_norm": d,
                 "ffn": ffn, "final_norm": d, "lm_head": counts.get("lm_head", 0)}
    dense = dense_stages(m, T, per_stage, rotated=m.rotary_dim)
    at = next(i for i, st in enumerate(dense) if st.key == "attention")
    linear = Stage("linear_attention", (T, d), n_linear * lin_layer, n_linear, lin_layer,
                   label="linear attn write (out_proj)",
                   inner=(("linear attn in_proj_qkv (q | k | v)", (T, 2 * key_dim + nv * dv)),
                          ("linear attn gates z | b | a", (T, nv * dv + 2 * nv))))
    stages = (*dense[:at], replace(dense[at], layers=n_full, params_per_layer=attn_layer,
                                   params=n_full * attn_layer), linear, *dense[at + 1:],
              *(Stage(k, (), counts[k]) for k in TEXT_ONLY if k in counts))
    per_layer = {"attention": attn_layer - qk_norms, "ffn": ffn, "norm": 2 * d + qk_norms}
    per_layer["total"] = sum(per_layer.values())
    per_layer["linear_attention"] = lin_layer - dv  # without its gated norm
    other = [k for k in TEXT_ONLY if k in counts]
    return Anatomy(
        name=name, source=source, model=m, tokens=T, stages=stages,
        params_by_component=counts, params_per_layer=per_layer,
        total_params=sum(counts.values()), ffn_share=share, ffn_multiple=m.ffn_hidden / d,
        q_proj_width=q_width(m), n_writes=m.n_writes, init_std=m.init_std,
        residual_init_std=replace(m, scaled_init=True, init_gain=1.0).out_proj_std,
        share_definition=f"FFN of the {len(kinds)} trunk layers / all checkpoint weights"
        + (f" (with {' and '.join(other)})" if other else ""),
        text_ffn_share=text_share if other else None,
        text_share_definition=(f"FFN of the {len(kinds)} trunk layers / the text model "
                               f"(embedding, trunk, final norm, LM head; no {' or '.join(other)})"
                               if other else ""),
        layer_kinds=((FULL, n_full), (LINEAR, n_linear)))


def anatomy_of_preset(preset: str, tokens: int = 5) -> Anatomy:
    cfg = get_preset(preset).model
    doc = (PRESETS[preset].__doc__ or "").strip().splitlines()[0]
    return anatomy(cfg, tokens, name=preset, source=f"preset {preset!r}: {doc}")


# The lesson's generations, each computed from a preset or a shipped config; the first
# field names the generation in depthlab/locales/<lang>/anatomy.json.
EVOLUTION = (
    ("2017", "preset", "vaswani2017", {"d_model": 512, "n_heads": 8, "n_layers": 6,
                                       "vocab_size": 37000}),
    ("2019", "config", "gpt2", {}),
    ("2020_23", "config", "llama-2-7b", {}),
    ("2020_23", "config", "deepseek-llm-67b", {}),
    ("2025", "config", "qwen3-14b", {}),
    ("2025", "config", "qwen3-32b", {}),
    ("2025_26", "config", "lesson-anchor", {}),
)


def _init_texts(m: ModelConfig, a: Anatomy) -> dict[str, str]:
    """The evolution row's init std in exact digits: the rule 0.02/sqrt(2L) and its value
    ("0.02/√8", "~0.00707107"), or the plain std without a depth rule (rule "")."""
    if m.scaled_init and a.residual_init_std != m.init_std:
        rule, value = init_scale_text(m.init_std, a.n_writes)
        return {"residual_init_rule": rule, "residual_init_std_text": value}
    return {"residual_init_rule": "", "residual_init_std_text": exact_text(parse_decimal(m.init_std))}


def evolution_table() -> list[dict[str, Any]]:
    """One row per model: FFN kind and width, FFN share, q_proj width, norm, writes, init."""
    rows = []
    for generation, kind, name, overrides in EVOLUTION:
        if kind == "preset":
            a = anatomy_of_preset(name)
            a = anatomy(replace(a.model, **overrides), name=name,
                        source=a.source + " at Transformer-base size (d 512, 8 heads, 6 layers)")
        else:
            a = anatomy_of(name)
        m = a.model
        key = f"anatomy.generation.{generation}"
        rows.append({
            "generation": text(key, "en"), "generation_zh": text(key, "zh"),
            "name": a.name, "source": a.source,
            "ffn": m.ffn, "d_model": m.d_model, "d_ff": m.ffn_hidden,
            "ffn_multiple": round(a.ffn_multiple, 3), "ffn_share": a.ffn_share,
            "q_proj_in": m.d_model, "q_proj_width": a.q_proj_width, "attn_gate": m.attn_gate,
            "norm": m.norm, "placement": m.placement, "qk_norm": m.qk_norm,
            "n_layers": m.n_layers, "n_writes": a.n_writes, "total_params": a.total_params,
            "residual_init_std": a.residual_init_std if m.scaled_init else m.init_std,
            **_init_texts(m, a),
        })
    return rows
