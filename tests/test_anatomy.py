"""Anatomy numbers equal hand computations for every shipped config."""

import json

import pytest

from depthlab.errors import UserError
from depthlab.hf.mapping import HYBRID_TYPES
from depthlab.probes import anatomy_of, anatomy_of_preset, evolution_table, shipped_configs
from depthlab.probes.anatomy import load_hf_config


def hand_count(raw: dict) -> int:
    """Parameters of a config.json, written out by hand from the architecture."""
    if raw["model_type"] == "gpt2":
        d, L, V, P = raw["n_embd"], raw["n_layer"], raw["vocab_size"], raw["n_positions"]
        f = raw["n_inner"] or 4 * d
        attn = 4 * d * d + 4 * d  # q, k, v, o with biases
        ffn = 2 * d * f + f + d
        norms = 2 * 2 * d
        return V * d + P * d + L * (attn + ffn + norms) + 2 * d  # tied head
    d, L, V = raw["hidden_size"], raw["num_hidden_layers"], raw["vocab_size"]
    H, K = raw["num_attention_heads"], raw["num_key_value_heads"]
    E = raw.get("head_dim") or d // H
    gate = 2 if raw.get("attn_output_gate") else 1
    attn = d * H * E * gate + 2 * d * K * E + H * E * d
    if raw["model_type"] == "qwen3":
        attn += 2 * E  # QK-norm scales
    ffn = 3 * d * raw["intermediate_size"]
    head = 0 if raw["tie_word_embeddings"] else V * d
    return V * d + L * (attn + ffn + 2 * d) + d + head


def test_gpt2_small_is_124m():
    a = anatomy_of("gpt2")
    assert a.total_params == 124_439_808
    assert a.ffn_multiple == 4.0 and a.n_writes == 24
    assert a.residual_init_std == pytest.approx(0.02 / 24**0.5)


def test_llama_2_7b_is_the_published_count():
    assert anatomy_of("llama-2-7b").total_params == 6_738_415_616


DENSE = [n for n in shipped_configs() if load_hf_config(n)["model_type"] not in HYBRID_TYPES]


def test_every_shipped_config_says_where_its_numbers_come_from():
    assert all(load_hf_config(n).get("_source") for n in shipped_configs())


@pytest.mark.parametrize("name", DENSE)
def test_shipped_configs_match_hand_counts(name):
    raw = load_hf_config(name)
    a = anatomy_of(name, tokens=5)
    assert a.total_params == hand_count(raw)
    assert sum(a.params_by_component.values()) == a.total_params
    assert a.params_by_component["ffn"] == a.model.n_layers * a.params_per_layer["ffn"]
    shapes = dict(a.shapes)
    d = a.model.d_model
    assert shapes["embedding"] == (5, d)
    assert shapes["logits"] == (5, a.model.vocab_size)
    assert shapes["ffn hidden"] == (5, a.model.ffn_hidden)
    assert shapes["attention scores"] == (a.model.n_heads, 5, 5)
    json.dumps(a.to_json())


def test_lesson_figures_that_come_from_configs():
    assert anatomy_of("deepseek-llm-67b").model.ffn_hidden == 22016
    q14 = anatomy_of("qwen3-14b")
    assert (q14.model.d_model, q14.model.ffn_hidden) == (5120, 17408)
    assert round(q14.ffn_multiple, 1) == 3.4
    anchor = anatomy_of("lesson-anchor")
    assert anchor.q_proj_width == 12288 == 2 * 6144
    assert anchor.n_writes == 128
    assert dict(anchor.shapes)["q_proj (query | gate)"] == (5, 12288)


def test_evolution_table_rows():
    rows = evolution_table()
    names = [r["name"] for r in rows]
    assert names[0] == "vaswani2017" and "gpt2" in names and "lesson-anchor" in names
    first = rows[0]
    assert (first["d_model"], first["d_ff"], first["placement"]) == (512, 2048, "post")
    for r in rows:
        assert 0 < r["ffn_share"] < 1
        assert r["generation_zh"] and r["generation_zh"] != r["generation"]  # the page's 中文 header
    json.dumps(rows)


def test_presets_have_anatomy():
    a = anatomy_of_preset("course")
    assert a.n_writes == 8 and a.residual_init_std == pytest.approx(0.00707, abs=1e-5)


def test_unreadable_config(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(UserError):
        anatomy_of(str(bad))
    with pytest.raises(UserError):
        anatomy_of(str(tmp_path / "missing.json"))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(UserError):
        anatomy_of(str(other))


def transformers_counts(raw: dict) -> dict[str, int]:
    """The anchor's parameters by our components, from transformers' own Qwen3.5 model
    built on the meta device from the same config; the MTP layer (whose weights
    transformers skips) from its own decoder-layer and norm classes."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Qwen3_5Config"):
        pytest.skip("transformers has no Qwen3.5 (needs 5.x)")
    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5 as q35

    fields = {k: v for k, v in raw.items() if not k.startswith("_")}
    cfg = transformers.Qwen3_5Config(**fields)
    with torch.device("meta"):
        model = transformers.Qwen3_5ForConditionalGeneration(cfg)
    counts: dict[str, int] = {}

    def add(key: str, n: int) -> None:
        counts[key] = counts.get(key, 0) + n

    for name, p in model.named_parameters():
        leaf = name.split(".")[-2] if name.endswith((".weight", ".bias")) else name.split(".")[-1]
        if name.startswith("model.visual."):
            add("vision", p.numel())
        elif "embed_tokens" in name:
            add("embedding", p.numel())
        elif name.startswith("lm_head"):
            add("lm_head", p.numel())
        elif "norm" in leaf:
            add("norm", p.numel())
        elif ".self_attn." in name:
            add("attention", p.numel())
        elif ".mlp." in name:
            add("ffn", p.numel())
        elif leaf in ("in_proj_qkv", "out_proj"):
            add("linear_projections", p.numel())
        elif leaf in ("in_proj_z", "in_proj_b", "in_proj_a", "A_log", "dt_bias"):
            add("linear_gates", p.numel())
        elif leaf == "conv1d":
            add("linear_conv", p.numel())
        else:
            raise AssertionError(f"unclassified parameter {name}")
    tc = cfg.text_config
    d = tc.hidden_size
    mtp_cfg = transformers.Qwen3_5TextConfig(**(fields["text_config"] | {
        "num_hidden_layers": 1, "layer_types": ["full_attention"]}))
    with torch.device("meta"):
        mtp = torch.nn.ModuleList([q35.Qwen3_5DecoderLayer(mtp_cfg, 0),
                                   torch.nn.Linear(2 * d, d, bias=False)]
                                  + [q35.Qwen3_5RMSNorm(d) for _ in range(3)])
    counts["mtp"] = fields["text_config"]["mtp_num_hidden_layers"] * sum(
        p.numel() for p in mtp.parameters())
    return counts


def test_anchor_is_counted_as_the_hybrid_checkpoint_it_is():
    raw = load_hf_config("lesson-anchor")
    a = anatomy_of("lesson-anchor")
    assert a.params_by_component == transformers_counts(raw)
    assert a.total_params == 27_781_427_952
    assert a.params_by_component["ffn"] == 64 * 3 * 5120 * 17408 == 17_112_760_320
    assert round(100 * a.ffn_share, 1) == 61.6  # the lesson's figure: trunk FFN / all weights
    assert round(100 * a.text_ffn_share, 1) == 63.6  # without the vision tower and MTP
    assert "all checkpoint weights" in a.share_definition
    assert "no vision or mtp" in a.text_share_definition
    assert dict(a.layer_kinds) == {"full_attention": 16, "linear_attention": 48}
    shapes = dict(a.shapes)
    assert shapes["q_proj (query | gate)"] == (5, 12288)
    assert shapes["linear attn in_proj_qkv (q | k | v)"] == (5, 2 * 16 * 128 + 48 * 128)


def test_hybrid_layer_types_follow_transformers_rule():
    from depthlab.hf.config_map import layer_types, mixer_fields

    kinds = layer_types({"num_hidden_layers": 8, "full_attention_interval": 4})
    assert kinds == ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + [
        "full_attention"]
    assert mixer_fields(kinds) == {"mixer": "gated_deltanet", "layer_pattern": "LLLA"}
    with pytest.raises(UserError, match="layer_types must list 8 entries"):
        layer_types({"num_hidden_layers": 8, "layer_types": ["full_attention"]})
    with pytest.raises(UserError, match="full_attention_interval=0 is not supported: expected "
                                        "a positive integer"):
        layer_types({"num_hidden_layers": 8, "full_attention_interval": 0})


def test_hybrid_config_without_vision_or_mtp_has_one_definition(tmp_path):
    raw = load_hf_config("lesson-anchor")
    text = {k: v for k, v in raw["text_config"].items() if k != "mtp_num_hidden_layers"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen3_5", "text_config": text}))
    a = anatomy_of(str(path))
    assert "vision" not in a.params_by_component and "mtp" not in a.params_by_component
    assert a.text_ffn_share is None
    assert a.total_params == 27_781_427_952 - 460_730_096 - 424_699_392


SMALL_HYBRID = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4,
                "num_attention_heads": 4, "intermediate_size": 128, "mtp_num_hidden_layers": 1}


@pytest.mark.parametrize("given", [{"num_key_value_heads": 2}, {}, {"head_dim": 16}])
def test_hybrid_counts_use_the_class_defaults_the_shapes_use(tmp_path, given):
    """Without head_dim (Qwen3.5's class default 256, not hidden / heads) or
    num_key_value_heads (default 4), the full-attention layers are counted with the same
    head size and KV heads their shapes are drawn with, and as transformers builds them."""
    raw = {"model_type": "qwen3_5", "text_config": SMALL_HYBRID | given,
           "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 64,
                             "num_heads": 2, "out_hidden_size": 64}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    a = anatomy_of(str(path))
    assert a.params_by_component == transformers_counts(raw)
    head = given.get("head_dim", 256)
    assert dict(a.shapes)["q_proj (query | gate)"] == (5, 2 * 4 * head)


@pytest.mark.parametrize("field, value, says", [
    ("attention_bias", "false", r'attention_bias="false" is not supported: expected false'),
    ("partial_rotary_factor", "x", r'partial_rotary_factor="x" is not supported: expected a '
                                   r"finite number"),
    ("partial_rotary_factor", None, r"partial_rotary_factor is missing"),
    ("partial_rotary_factor", -1, r"partial_rotary_factor=-1 is not supported: expected a "
                                  r"number in \(0, 1\]"),
    ("partial_rotary_factor", 3, r"partial_rotary_factor=3 is not supported: expected a number "
                                 r"in \(0, 1\]")])
def test_hybrid_fields_of_the_wrong_type_are_refused(tmp_path, field, value, says):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen3_5", "text_config": SMALL_HYBRID | {field: value}}))
    with pytest.raises(UserError, match=says):
        anatomy_of(str(path))


# ---- the data-flow stages the page draws ---------------------------------------------

STAGE_KEYS = {"key", "shape", "layers", "params_per_layer", "params", "tied", "inner"}


@pytest.mark.parametrize("name", shipped_configs())
def test_stages_add_up_to_the_total(name):
    a = anatomy_of(name, tokens=7)
    data = a.to_json()
    assert sum(st["params"] for st in data["stages"]) == a.total_params
    for st in data["stages"]:
        assert set(st) == STAGE_KEYS
        if st["layers"] is not None:
            assert st["params"] == st["layers"] * st["params_per_layer"]
    keys = [st["key"] for st in data["stages"]]
    assert keys[:2] == ["embedding", "positions"] and "lm_head" in keys
    assert keys.index("attn_norm") < keys.index("attention") < keys.index("ffn")


def test_gpt2_stages_are_the_hand_counts():
    """GPT-2 small: LayerNorm has a weight and a bias, so the final norm holds 2 x 768."""
    st = {s.key: s for s in anatomy_of("gpt2").stages}
    d, f, V, P = 768, 3072, 50257, 1024
    assert st["final_norm"].params == 1_536 == 2 * d
    assert (st["attn_norm"].params_per_layer, st["ffn_norm"].params_per_layer) == (2 * d, 2 * d)
    assert st["attention"].params_per_layer == 4 * d * d + 4 * d
    assert st["ffn"].params_per_layer == 2 * d * f + f + d
    assert (st["embedding"].params, st["positions"].params) == (V * d, P * d)
    assert st["lm_head"].tied and st["lm_head"].params == 0 and st["lm_head"].shape == (5, V)


def test_llama_stages_rmsnorm_rope_and_untied_head():
    st = {s.key: s for s in anatomy_of("llama-2-7b").stages}
    assert st["final_norm"].params == 4096  # RMSNorm: a weight only
    assert st["positions"].params == 0 and st["positions"].shape == (5, 64)  # RoPE: 128 / 2 angles
    assert not st["lm_head"].tied and st["lm_head"].params == 32000 * 4096


# Every placement, residual and norm (a placement other than pre needs a norm).
SWITCHES = [(p, r, n) for p in ("pre", "post", "sandwich", "output")
            for r in ("none", "plain", "scaled", "rezero")
            for n in ("none", "layernorm", "rmsnorm") if n != "none" or p == "pre"]


@pytest.mark.parametrize("placement,residual,norm", SWITCHES)
def test_stages_cover_every_switch(placement, residual, norm):
    from depthlab.config import ModelConfig
    from depthlab.probes import anatomy

    m = ModelConfig(n_layers=3, d_model=32, n_heads=4, vocab_size=50, placement=placement,
                    residual=residual, norm=norm, position="learned", tie_embeddings=False,
                    qk_norm=norm != "none", final_norm=norm != "none", attn_gate=True,
                    bias=residual == "scaled")
    a = anatomy(m, tokens=4)
    keys = [s.key for s in a.stages]
    assert sum(s.params for s in a.stages) == a.total_params
    assert ("attn_residual" in keys) == (residual != "none")
    assert ("attn_norm" in keys) == (norm != "none")
    if residual == "rezero":  # one learned scalar per write
        assert {s.key: s.params_per_layer for s in a.stages}["attn_residual"] == 1
    if norm != "none" and residual != "none":
        where = keys.index("attn_norm") - keys.index("attention")
        assert where == {"post": 2, "output": 1}.get(placement, -1)
    assert {s.key: s.layers for s in a.stages}["ffn"] == 3  # one block counted, three stand
    assert ("final_norm" in keys) == (norm != "none")


# One switch at a time, including those whose blocks differ (value_residual: block 0 has
# no mix) and those that learn residual parameters.
COUNTED = [{}, {"value_residual": True}, {"residual": "rezero"}, {"residual": "hc", "streams": 3},
           {"residual": "mhc", "streams": 2}, {"residual": "attnres"}, {"norm": "dyt"},
           {"residual": "deepnorm", "placement": "post"}, {"attn_gate": True, "qk_norm": True},
           {"n_layers": 1, "value_residual": True},
           # the stream shortcuts: value embeddings on every other block, U-net skips on
           # the second half's, smear at the embedding, backout before the final norm
           {"value_embeds": True}, {"value_embeds": True, "n_layers": 5}, {"unet_skips": True},
           {"x0_mix": True, "backout": True, "smear": True, "logit_softcap": 15.0},
           {"x0_mix": True, "backout": True, "smear": True, "value_embeds": True,
            "unet_skips": True, "value_residual": True, "n_layers": 7}]


@pytest.mark.parametrize("changes", COUNTED, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "course")
def test_the_page_and_model_describe_count_the_same_parameters_as_the_model(changes):
    """The anatomy, `model describe` and the built model itself agree to the parameter."""
    from dataclasses import replace

    import torch

    from depthlab.model import Transformer
    from depthlab.model.summary import summarize
    from depthlab.presets import get_preset
    from depthlab.probes import anatomy

    m = replace(get_preset("course").model, **({"vocab_size": 64, "d_model": 32} | changes))
    torch.manual_seed(0)
    built = Transformer(m)
    real = sum(p.numel() for p in built.parameters())
    a, s = anatomy(m, tokens=4), summarize(m)
    assert a.total_params == s.total_params == real
    assert sum(st.params for st in a.stages) == real
    assert a.params_by_component == s.params_by_component
    last = sum(p.numel() for p in built.blocks[-1].parameters())
    assert a.params_per_layer["total"] == s.params_per_block == last


def test_the_cli_writes_the_init_std_as_the_config_does(tmp_path, capsys):
    """0.0123456789 was printed as 0.0123457 beside a value computed from the full std, so
    '0.0123457/sqrt(4) = ~0.00617284' read as an arithmetic slip."""
    from depthlab.cli import main

    raw = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
           "initializer_range": 0.0123456789}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert main(["anatomy", str(path)]) == 0
    out = capsys.readouterr().out
    assert "init std 0.0123456789, 0.0123456789/sqrt(2L) = 0.0123456789/sqrt(4) = ~0.00617284" in out
