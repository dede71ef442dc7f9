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
from depthlab.errors import ConfigError, UserError, read_json_object
from depthlab.probes.hybrid import (
    FULL,
    HYBRID_TYPES,
    LINEAR,
    ffn_shares,
    hybrid_counts,
    layer_types,
    text_config,
)

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


def _need(raw: dict[str, Any], key: str) -> Any:
    if key not in raw:
        raise UserError(f"config.json has no {key!r} (model_type {raw.get('model_type')!r})")
    return raw[key]


def model_config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    """Map a GPT-2 or Llama-family (llama, mistral, qwen2, qwen3) config.json to a ModelConfig.
    For a hybrid (qwen3_5) it is the model its full-attention layers would make if every
    layer were one: the shapes of those layers; `hybrid_anatomy` counts the real mix."""
    kind = raw.get("model_type")
    try:
        if kind == "gpt2":
            d = _need(raw, "n_embd")
            cfg = ModelConfig(
                vocab_size=_need(raw, "vocab_size"), context_len=raw.get("n_positions", 1024),
                n_layers=_need(raw, "n_layer"), d_model=d, n_heads=_need(raw, "n_head"),
                d_ff=raw.get("n_inner") or 4 * d, ffn="gelu", norm="layernorm",
                norm_eps=raw.get("layer_norm_epsilon", 1e-5), position="learned", bias=True,
                tie_embeddings=raw.get("tie_word_embeddings", True), scaled_init=True,
            )
        elif kind in ("llama", "mistral", "qwen2", "qwen3", *HYBRID_TYPES):
            hybrid = kind in HYBRID_TYPES  # the full-attention layers of a hybrid trunk
            raw = text_config(raw) | {"tie_word_embeddings": raw.get("tie_word_embeddings", False)}
            zero_centered = hybrid or bool(raw.get("zero_centered_norm", False))
            cfg = ModelConfig(
                vocab_size=_need(raw, "vocab_size"),
                context_len=raw.get("max_position_embeddings", 4096),
                n_layers=_need(raw, "num_hidden_layers"), d_model=_need(raw, "hidden_size"),
                n_heads=_need(raw, "num_attention_heads"),
                n_kv_heads=raw.get("num_key_value_heads"), head_dim=raw.get("head_dim"),
                d_ff=_need(raw, "intermediate_size"), ffn="swiglu",
                norm="rmsnorm_zero_centered" if zero_centered else "rmsnorm",
                norm_eps=raw.get("rms_norm_eps", 1e-6), qk_norm=kind == "qwen3" or hybrid,
                attn_gate=bool(raw.get("attn_output_gate", hybrid)),
                rope_theta=float(raw.get("rope_theta", 10000.0)),
                qkv_bias=kind == "qwen2" or bool(raw.get("attention_bias", False)),
                tie_embeddings=bool(raw.get("tie_word_embeddings", False)), scaled_init=False,
            )
        else:
            raise UserError(f"model_type {kind!r} is not supported; supported: gpt2, llama, "
                            "mistral, qwen2, qwen3, qwen3_5 (hybrid)")
        return validate_model(cfg)
    except (TypeError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise UserError(f"config.json has a value of the wrong type ({e})") from None


@dataclass(frozen=True)
class Anatomy:
    name: str
    source: str
    model: ModelConfig
    tokens: int
    shapes: tuple[tuple[str, tuple[int, ...]], ...]  # per token count T, batch omitted
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

    def to_json(self) -> dict:
        return {"kind": "anatomy", "name": self.name, "source": self.source,
                "model": asdict(self.model), "tokens": self.tokens,
                "shapes": [{"stage": s, "shape": list(sh)} for s, sh in self.shapes],
                "params_by_component": dict(self.params_by_component),
                "params_per_layer": dict(self.params_per_layer),
                "total_params": self.total_params, "ffn_share": self.ffn_share,
                "ffn_multiple": self.ffn_multiple, "q_proj_width": self.q_proj_width,
                "attn_gate": self.model.attn_gate, "n_writes": self.n_writes,
                "init_std": self.init_std, "residual_init_std": self.residual_init_std,
                "share_definition": self.share_definition, "text_ffn_share": self.text_ffn_share,
                "text_share_definition": self.text_share_definition,
                "layer_kinds": dict(self.layer_kinds), "stages": stages(self)}


def stages(a: Anatomy) -> list[dict]:
    """The data flow in forward order, for the page: per stage its key (embedding,
    positions, attn_norm, attention, attn_residual, ffn_norm, ffn, ffn_residual,
    final_norm, lm_head), output shape for T tokens, the shapes inside it, and the
    parameters it holds, counted by name on a one-block copy of the model: per layer and
    over the `layers` blocks inside the stack, once outside it. The final norm counts all
    its weights (LayerNorm: weight and bias); a tied lm_head holds none of its own. A
    hybrid is drawn as the model of its full-attention layers."""
    from depthlab.model.summary import build_meta

    m, T, d = a.model, a.tokens, a.model.d_model
    parts = {"embed_tokens": "embedding", "pos_embed": "positions", "attn": "attention",
             "mlp": "ffn", "mlp_residual": "ffn_residual", "mlp_norm": "ffn_norm"}
    own: dict[str, int] = {}
    for name, p in build_meta(replace(m, n_layers=1)).named_parameters():
        part = name.split(".")[2 if name.startswith("blocks.") else 0]  # attn_norm_in -> attn_norm
        part = part.removesuffix("_in").removesuffix("_out").removesuffix("_post")
        key = parts.get(part, part)
        own[key] = own.get(key, 0) + p.numel()
    named = dict(a.shapes)
    inner = {"attention": [(st, sh) for st, sh in a.shapes[1:6]],
             "ffn": [("ffn hidden", named["ffn hidden"])]}

    def stage(key, shape, layers=None):
        n = own.get(key, 0)
        return {"key": key, "shape": list(shape), "layers": layers,
                "params_per_layer": n if layers else None, "params": n * (layers or 1),
                "tied": key == "lm_head" and m.tie_embeddings,
                "inner": [{"stage": st, "shape": list(sh)} for st, sh in inner.get(key, [])]}

    out = [stage("embedding", (T, d)),
           stage("positions", (T, d) if m.position == "learned" else (T, m.head_size // 2))]
    for prefix, sub in (("attn", "attention"), ("ffn", "ffn")):
        core = [stage(sub, (T, d), m.n_layers)]
        norm = [stage(f"{prefix}_norm", (T, d), m.n_layers)] if m.norm != "none" else []
        res = [stage(f"{prefix}_residual", (T, d), m.n_layers)] if m.residual != "none" else []
        out += {"post": core + res + norm, "output": core + norm + res}.get(m.placement, norm + core + res)
    if m.final_norm:
        out.append(stage("final_norm", (T, d)))
    return out + [stage("lm_head", (T, m.vocab_size))]


@lru_cache(maxsize=128)
def anatomy(model: ModelConfig, tokens: int = 5, name: str = "", source: str = "") -> Anatomy:
    """Shapes at every stage for T tokens and parameters per component and per layer."""
    if not isinstance(tokens, int) or not 1 <= tokens <= 4096:
        raise UserError(f"tokens must be an integer between 1 and 4096, got {tokens!r}")
    m = validate_model(model)
    by_component, block = _param_counts(m)
    T, d, H, K, E = tokens, m.d_model, m.n_heads, m.kv_heads, m.head_size
    q_width = H * E * (2 if m.attn_gate else 1)
    shapes = [
        ("embedding", (T, d)),
        ("q_proj (query" + (" | gate)" if m.attn_gate else ")"), (T, q_width)),
        ("k_proj", (T, K * E)),
        ("v_proj", (T, K * E)),
        ("attention scores", (H, T, T)),
        ("attention output (o_proj in)", (T, H * E)),
        ("attention write", (T, d)),
        ("ffn hidden", (T, m.ffn_hidden)),
        ("ffn write", (T, d)),
        ("logits", (T, m.vocab_size)),
    ]
    total = sum(by_component.values())
    ffn = by_component.get("ffn", 0)
    return Anatomy(
        name=name, source=source, model=m, tokens=T, shapes=tuple(shapes),
        params_by_component=by_component, params_per_layer=block,
        total_params=total, ffn_share=ffn / total, ffn_multiple=m.ffn_hidden / d,
        q_proj_width=q_width, n_writes=m.n_writes, init_std=m.init_std,
        residual_init_std=replace(m, scaled_init=True, init_gain=1.0).out_proj_std,
    )


def _param_counts(m: ModelConfig) -> tuple[dict[str, int], dict[str, int]]:
    """Parameters by component and of one block, from a one-block copy of the model on the
    meta device (the blocks are identical, so L blocks are L copies of it: building a
    95-layer model would take seconds). torch is imported here, not with the module, so
    listing or validating configs does not wait for it."""
    from depthlab.model.summary import build_meta, component_of

    one = build_meta(replace(m, n_layers=1))
    by_component: dict[str, int] = {}
    block = {"attention": 0, "ffn": 0, "norm": 0}  # + "residual" where a variant learns scalars
    for pname, p in one.named_parameters():
        key = component_of(pname)
        in_block = pname.startswith("blocks.")
        by_component[key] = by_component.get(key, 0) + p.numel() * (m.n_layers if in_block else 1)
        if in_block:
            block[key] = block.get(key, 0) + p.numel()
    block["total"] = sum(block.values())
    return by_component, block


def anatomy_of(name_or_path: str, tokens: int = 5) -> Anatomy:
    """Anatomy of a shipped config name (see `shipped_configs()`) or a config.json path."""
    raw = load_hf_config(name_or_path)
    name, source = Path(name_or_path).stem, str(raw.get("_source", name_or_path))
    if raw.get("model_type") in HYBRID_TYPES:
        return hybrid_anatomy(raw, tokens, name, source)
    return anatomy(model_config_from_hf(raw), tokens, name=name, source=source)


def hybrid_anatomy(raw: dict[str, Any], tokens: int, name: str, source: str) -> Anatomy:
    """A hybrid checkpoint: the shapes of its full-attention and linear-attention layers,
    and its parameters counted as it really is (depthlab/probes/hybrid.py): linear
    attention, vision tower and MTP layers each a component of their own."""
    m = model_config_from_hf(raw)
    base = anatomy(m, tokens, name=name, source=source)
    tc = text_config(raw)
    counts = hybrid_counts(raw)
    kinds = layer_types(tc)
    share, text_share = ffn_shares(counts)
    nv, dv = tc.get("linear_num_value_heads", 32), tc.get("linear_value_head_dim", 128)
    key_dim = tc.get("linear_num_key_heads", 16) * tc.get("linear_key_head_dim", 128)
    T, d = base.tokens, m.d_model
    shapes = base.shapes[:7] + (
        ("linear attn in_proj_qkv (q | k | v)", (T, 2 * key_dim + nv * dv)),
        ("linear attn gates z | b | a", (T, nv * dv + 2 * nv)),
        ("linear attn write (out_proj)", (T, d)),
    ) + base.shapes[7:]
    per_layer = dict(base.params_per_layer)
    per_layer["linear_attention"] = sum(
        counts.get(k, 0) for k in ("linear_projections", "linear_gates", "linear_conv")
    ) // max(1, kinds.count(LINEAR))
    other = [k for k in ("vision", "mtp") if k in counts]
    return replace(
        base, shapes=shapes, params_by_component=counts, params_per_layer=per_layer,
        total_params=sum(counts.values()), ffn_share=share,
        share_definition=f"FFN of the {len(kinds)} trunk layers / all checkpoint weights"
        + (f" (with {' and '.join(other)})" if other else ""),
        text_ffn_share=text_share if other else None,
        text_share_definition=(f"FFN of the {len(kinds)} trunk layers / the text model "
                               f"(embedding, trunk, final norm, LM head; no {' or '.join(other)})"
                               if other else ""),
        layer_kinds=((FULL, kinds.count(FULL)), (LINEAR, kinds.count(LINEAR))))


def anatomy_of_preset(preset: str, tokens: int = 5) -> Anatomy:
    from depthlab.presets import PRESETS, get_preset

    cfg = get_preset(preset).model
    doc = (PRESETS[preset].__doc__ or "").strip().splitlines()[0]
    return anatomy(cfg, tokens, name=preset, source=f"preset {preset!r}: {doc}")


# The lesson's generations, each computed from a preset or a shipped config.
EVOLUTION = (
    ("2017 original", "preset", "vaswani2017", {"d_model": 512, "n_heads": 8, "n_layers": 6,
                                                "vocab_size": 37000}),
    ("2019 GPT-2", "config", "gpt2", {}),
    ("2020-23 Llama style", "config", "llama-2-7b", {}),
    ("2020-23 Llama style", "config", "deepseek-llm-67b", {}),
    ("2025 Qwen3 dense", "config", "qwen3-14b", {}),
    ("2025 Qwen3 dense", "config", "qwen3-32b", {}),
    ("2025-26 anchor (lesson)", "config", "lesson-anchor", {}),
)
GENERATION_ZH = {
    "2017 original": "2017 · 原版", "2019 GPT-2": "2019 · GPT-2",
    "2020-23 Llama style": "2020–23 · Llama 式", "2025 Qwen3 dense": "2025 · Qwen3 稠密",
    "2025-26 anchor (lesson)": "2025–26 · 本课锚点",
}


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
        rows.append({
            "generation": generation, "generation_zh": GENERATION_ZH[generation],
            "name": a.name, "source": a.source,
            "ffn": m.ffn, "d_model": m.d_model, "d_ff": m.ffn_hidden,
            "ffn_multiple": round(a.ffn_multiple, 3), "ffn_share": a.ffn_share,
            "q_proj_in": m.d_model, "q_proj_width": a.q_proj_width, "attn_gate": m.attn_gate,
            "norm": m.norm, "placement": m.placement, "qk_norm": m.qk_norm,
            "n_layers": m.n_layers, "n_writes": a.n_writes, "total_params": a.total_params,
            "residual_init_std": a.residual_init_std if m.scaled_init else m.init_std,
        })
    return rows
