"""Anatomy numbers equal hand computations for every shipped config."""

import json

import pytest

from depthlab.errors import UserError
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


@pytest.mark.parametrize("name", shipped_configs())
def test_shipped_configs_match_hand_counts(name):
    raw = load_hf_config(name)
    assert raw.get("_source"), "every shipped config says where its numbers come from"
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
