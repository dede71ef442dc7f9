"""The one Hugging Face mapping (depthlab/hf/mapping.py): its defaults are Transformers'
own, export and import invert each other, anatomy reads what import reads (and more,
never differently), and docs/real-models.md holds the table the code reads."""

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from depthlab.config import ModelConfig
from depthlab.errors import UserError
from depthlab.hf.config_map import hf_config_from_model, model_config_from_hf
from depthlab.hf.mapping import ANATOMY, FAMILIES, IMPORT, ROPE_FIELD
from depthlab.probes import anatomy, anatomy_of

ROOT = Path(__file__).resolve().parents[1]

CONFIG_CLASS = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config",
                "mistral": "MistralConfig", "gpt2": "GPT2Config", "qwen3_5": "Qwen3_5TextConfig"}

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64,
         "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}


def test_every_family_has_a_config_class_and_the_table_covers_them():
    assert set(CONFIG_CLASS) == set(FAMILIES)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_defaults_are_transformers_class_defaults(name):
    """A field missing from config.json means what Transformers' config class makes of it:
    its default, or (where ours is null) the value null stands for."""
    transformers = pytest.importorskip("transformers")
    cls = getattr(transformers, CONFIG_CLASS[name], None)
    if cls is None:
        pytest.skip(f"transformers {transformers.__version__} has no {CONFIG_CLASS[name]}")
    theirs = cls()
    fam = FAMILIES[name]
    ours_of = {f.ours: getattr(theirs, f.hf, None) for f in fam.fields}
    checked = 0
    for f in fam.fields:
        if f.hf == ROPE_FIELD:
            value = (theirs.rope_parameters or {}).get("rope_theta")
        elif hasattr(theirs, f.hf):
            value = getattr(theirs, f.hf)
        else:  # attn_output_gate: Qwen3.5 always gates; the anchor's config spells it out
            continue
        if f.default is not None:
            assert value == f.default, f"{name}.{f.hf}: Transformers {value!r}, ours {f.default!r}"
            checked += 1
        elif f.null is not None:
            assert value in (None, f.null(ours_of)), f"{name}.{f.hf}: {value!r}"
            checked += 1
    assert checked >= 3


MODELS = [
    ModelConfig(n_layers=2, d_model=32, n_heads=4, vocab_size=50, scaled_init=False),
    ModelConfig(n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, vocab_size=50, qkv_bias=True,
                rope_theta=5e5, tie_embeddings=False, scaled_init=False),
    ModelConfig(n_layers=3, d_model=48, n_heads=4, head_dim=16, vocab_size=50, qk_norm=True,
                d_ff=80, norm_eps=1e-6, init_std=0.1, scaled_init=False),
    ModelConfig(n_layers=2, d_model=32, n_heads=2, vocab_size=50, bias=True, scaled_init=False),
]


@pytest.mark.parametrize("m", MODELS)
def test_export_then_import_gives_the_model_back(m):
    raw = hf_config_from_model(m)
    back, kind = model_config_from_hf(raw, IMPORT)
    assert kind == raw["model_type"]
    resolved = replace(m, n_kv_heads=m.kv_heads, head_dim=m.head_size, d_ff=m.ffn_hidden)
    assert back == resolved


def test_anatomy_reads_what_changes_no_parameter_import_refuses_it():
    llama3 = {**LLAMA, "rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5,
                                           "factor": 8.0}, "sliding_window": 16}
    for change in ({"sliding_window": None}, {"rope_parameters": None}):
        with pytest.raises(UserError, match="is not supported"):
            model_config_from_hf({**llama3, **change}, IMPORT)
    m, kind = model_config_from_hf(llama3, ANATOMY)
    assert kind == "llama" and m.rope_theta == 5e5
    assert anatomy(m).total_params == anatomy(model_config_from_hf(LLAMA)[0]).total_params
    # A field that changes the parameters is refused by both, naming it.
    moe = {**LLAMA, "num_local_experts": 8}
    for purpose in (IMPORT, ANATOMY):
        with pytest.raises(UserError, match="field num_local_experts=8"):
            model_config_from_hf(moe, purpose)


def test_anatomy_only_families_and_one_reading_of_defaults():
    mistral = {**LLAMA, "architectures": ["MistralForCausalLM"], "model_type": "mistral"}
    with pytest.raises(UserError, match="field architectures="):
        model_config_from_hf(mistral, IMPORT)
    m, kind = model_config_from_hf(mistral, ANATOMY)
    assert kind == "mistral" and m == model_config_from_hf(LLAMA, IMPORT)[0]
    # Missing context length: the class default, the same for import and anatomy.
    bare = {k: v for k, v in LLAMA.items() if k != "max_position_embeddings"}
    assert model_config_from_hf(bare, ANATOMY)[0].context_len == 2048
    assert model_config_from_hf(bare, IMPORT)[0].context_len == 2048
    no_type = {k: v for k, v in LLAMA.items() if k != "model_type"}
    assert model_config_from_hf(no_type, ANATOMY)[1] == "llama"  # from architectures
    with pytest.raises(UserError, match="field architectures=.*LlamaForCausalLM"):
        model_config_from_hf({**no_type, "architectures": ["GPT2LMHeadModel"]}, ANATOMY)
    with pytest.raises(UserError, match="field hidden_size is missing"):
        model_config_from_hf({k: v for k, v in LLAMA.items() if k != "hidden_size"}, ANATOMY)


def test_llama_biases_are_both_or_neither():
    m, _ = model_config_from_hf({**LLAMA, "attention_bias": True, "mlp_bias": True})
    assert m.bias and not m.qkv_bias
    with pytest.raises(UserError, match="field attention_bias=true"):
        model_config_from_hf({**LLAMA, "attention_bias": True}, ANATOMY)


def test_gpt2_config_from_the_table_is_the_shipped_gpt2():
    a = anatomy_of("gpt2")
    m = a.model
    assert (m.norm, m.ffn, m.position, m.bias, m.tie_embeddings) == (
        "layernorm", "gelu", "learned", True, True)
    assert (m.context_len, m.ffn_hidden, m.norm_eps) == (1024, 3072, 1e-5)


def test_the_docs_hold_the_generated_table():
    spec = importlib.util.spec_from_file_location("hf_mapping_table",
                                                  ROOT / "scripts" / "hf_mapping_table.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    page = (ROOT / "docs" / "real-models.md").read_text(encoding="utf-8")
    assert script.with_table(page) == page, "run python scripts/hf_mapping_table.py"
    for fam in FAMILIES.values():
        assert f"`{fam.name}`" in page


def test_help_is_the_table(capsys):
    from depthlab.cli import main

    for argv, families in ((["hf", "import", "--help"], {"llama", "qwen2", "qwen3", "qwen3_5"}),
                           (["anatomy", "--help"], set(FAMILIES))):
        with pytest.raises(SystemExit):
            main(argv)
        out = capsys.readouterr().out
        assert "num_key_value_heads -> model.n_kv_heads" in out
        listed = {line.split()[0] for line in out.split("families:")[1].splitlines()
                  if line.startswith("  ") and not line.startswith("    ")}
        assert listed == families
