"""What `depthlab hf import/export` refuses: every unsupported field or switch gives one
line naming it and exit code 2; broken files give a clear error, not a traceback.
No Transformers needed: checkpoints here are written with safetensors directly."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from depthlab import rundir
from depthlab.cli import main
from depthlab.config import Config, ModelConfig
from depthlab.hf import hf_config_from_model, model_config_from_hf
from depthlab.hf.mapping import LLAMA_NAMES
from depthlab.hf.weights import hf_name
from depthlab.model import Transformer

BASE = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 50,
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5, "rope_parameters": {"rope_type": "default", "rope_theta": 500.0},
    "tie_word_embeddings": False, "hidden_act": "silu",
}


def write_hf(hf_dir: Path, raw: dict, weights: bool = True) -> Path:
    """A checkpoint directory written without Transformers (names via our own map)."""
    hf_dir.mkdir(parents=True, exist_ok=True)
    (hf_dir / "config.json").write_text(json.dumps(raw))
    if weights:
        model_cfg, _ = model_config_from_hf(raw)
        state = {hf_name(k, LLAMA_NAMES): v for k, v in Transformer(model_cfg).state_dict().items()}
        save_file(state, str(hf_dir / "model.safetensors"), metadata={"format": "pt"})
    return hf_dir


def _run_cli(capsys, argv) -> tuple[int, list[str]]:
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return rc, err


QWEN3 = {**BASE, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 8}

IMPORT_REFUSALS = [
    ({"architectures": ["MistralForCausalLM"]}, "architectures"),
    ({"architectures": ["LlamaForCausalLM"], "model_type": "qwen2"}, "model_type"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}},
     "rope_parameters.rope_type"),
    ({"rope_parameters": None, "rope_scaling": {"type": "linear", "factor": 2.0}},
     "rope_scaling.rope_type"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                          "partial_rotary_factor": 0.5}}, "rope_parameters.partial_rotary_factor"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"attention_bias": True}, "attention_bias"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"sliding_window": 16}, "sliding_window"),
    ({"num_local_experts": 8}, "num_local_experts"),
    ({"quantization_config": {"quant_method": "gptq"}}, "quantization_config"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "use_sliding_window": True},
     "use_sliding_window"),
    ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
      "layer_types": ["full_attention", "sliding_attention"]}, "layer_types"),
    ({**QWEN3, "attention_bias": True}, "attention_bias"),
    ({**QWEN3, "num_experts": 4, "moe_intermediate_size": 16}, "num_experts"),
]


@pytest.mark.parametrize("change,field", IMPORT_REFUSALS)
def test_import_refuses_naming_the_field(tmp_path, capsys, change, field):
    write_hf(tmp_path / "hf", {**BASE, **change}, weights=False)
    rc, err = _run_cli(capsys, ["hf", "import", str(tmp_path / "hf"), "--out", str(tmp_path / "r")])
    assert rc == 2 and len(err) == 1
    assert f"field {field}=" in err[0] and "not supported" in err[0]
    assert not (tmp_path / "r").exists()


def test_import_without_transformers_and_missing_fields(tmp_path):
    """Fields missing from config.json take Transformers' class defaults."""
    raw = {k: v for k, v in BASE.items() if k not in ("rms_norm_eps", "rope_parameters",
                                                      "tie_word_embeddings", "num_key_value_heads")}
    m, kind = model_config_from_hf(raw)
    assert kind == "llama"
    assert (m.norm_eps, m.rope_theta, m.tie_embeddings, m.kv_heads) == (1e-6, 1e4, False, 4)
    m, _ = model_config_from_hf({**raw, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"})
    assert (m.head_size, m.kv_heads, m.qk_norm) == (128, 32, True)  # Qwen3Config's defaults


def _run_with(tmp_path, **changes):
    cfg = Config(model=replace(ModelConfig(n_layers=2, d_model=32, n_heads=4, vocab_size=50), **changes))
    rundir.write_config(tmp_path / "run", cfg)
    return tmp_path / "run"


EXPORT_REFUSALS = [
    ({"residual": "scaled"}, "model.residual"),
    ({"residual": "none"}, "model.residual"),
    ({"residual": "ngpt", "norm": "none", "final_norm": False}, "model.residual"),
    ({"placement": "post"}, "model.placement"),
    ({"placement": "sandwich"}, "model.placement"),
    ({"norm": "layernorm"}, "model.norm"),
    ({"norm": "rmsnorm_zero_centered"}, "model.norm"),
    ({"attn_gate": True}, "model.attn_gate"),
    ({"ffn": "gelu"}, "model.ffn"),
    ({"ffn_clamp": 7.0}, "model.ffn_clamp"),
    ({"position": "learned"}, "model.position"),
    ({"final_norm": False}, "model.final_norm"),
    ({"qk_norm": True, "qkv_bias": True}, "model.qkv_bias"),
    ({"qk_norm": True, "bias": True}, "model.bias"),
    ({"x0_mix": True}, "model.x0_mix"),
    ({"backout": True, "n_layers": 3}, "model.backout"),
    ({"value_embeds": True}, "model.value_embeds"),
    ({"smear": True}, "model.smear"),
    ({"unet_skips": True}, "model.unet_skips"),
    ({"logit_softcap": 15.0}, "model.logit_softcap"),
]


@pytest.mark.parametrize("changes,switch", EXPORT_REFUSALS)
def test_export_refuses_naming_the_switch(tmp_path, capsys, changes, switch):
    run = _run_with(tmp_path, **changes)
    rc, err = _run_cli(capsys, ["hf", "export", str(run), "--out", str(tmp_path / "hf")])
    assert rc == 2 and len(err) == 1
    assert f"{switch}=" in err[0] and ("no Hugging Face equivalent" in err[0])
    assert not (tmp_path / "hf").exists()


def test_export_picks_the_architecture():
    m = ModelConfig(n_layers=2, d_model=32, n_heads=4, scaled_init=True)
    assert hf_config_from_model(m)["architectures"] == ["LlamaForCausalLM"]
    assert hf_config_from_model(replace(m, qkv_bias=True))["model_type"] == "qwen2"
    assert hf_config_from_model(replace(m, qk_norm=True))["model_type"] == "qwen3"
    llama_bias = hf_config_from_model(replace(m, bias=True))
    assert llama_bias["attention_bias"] and llama_bias["mlp_bias"]


@pytest.mark.parametrize("cut", [8, 200, -100])
def test_truncated_safetensors_is_a_clear_error(tmp_path, capsys, cut):
    hf_dir = tmp_path / "hf"
    write_hf(hf_dir, BASE)
    path = hf_dir / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:cut])
    rc, err = _run_cli(capsys, ["hf", "import", str(hf_dir), "--out", str(tmp_path / "r")])
    assert rc == 2 and len(err) == 1
    assert "model.safetensors: truncated or not a safetensors file" in err[0]


def test_truncated_shard_and_missing_tensor(tmp_path, capsys):
    hf_dir = tmp_path / "hf"
    write_hf(hf_dir, BASE)
    from safetensors.torch import load_file

    state = load_file(str(hf_dir / "model.safetensors"))
    (hf_dir / "model.safetensors").unlink()
    names = sorted(state)
    half = len(names) // 2
    save_file({k: state[k] for k in names[:half]}, str(hf_dir / "a.safetensors"))
    save_file({k: state[k] for k in names[half:]}, str(hf_dir / "b.safetensors"))
    index = {"weight_map": {k: "a.safetensors" if i < half else "b.safetensors"
                            for i, k in enumerate(names)}}
    (hf_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    out = ["hf", "import", str(hf_dir), "--out", str(tmp_path / "r")]
    assert main(out) == 0  # the sharded form reads
    capsys.readouterr()

    b = hf_dir / "b.safetensors"
    good = b.read_bytes()
    b.write_bytes(good[: len(good) // 2])
    rc, err = _run_cli(capsys, out + ["--force"])
    assert rc == 2 and len(err) == 1 and "b.safetensors: truncated" in err[0]

    b.write_bytes(good)
    del index["weight_map"]["model.norm.weight"]
    (hf_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    rc, err = _run_cli(capsys, out + ["--force"])
    assert rc == 2 and len(err) == 1 and "'model.norm.weight' is missing" in err[0]


def test_existing_output_needs_force(tmp_path, capsys):
    write_hf(tmp_path / "hf", BASE)
    argv = ["hf", "import", str(tmp_path / "hf"), "--out", str(tmp_path / "r")]
    assert main(argv) == 0
    rc, err = _run_cli(capsys, argv)
    assert rc == 2 and "--force" in err[0]
    assert main(argv + ["--force"]) == 0


def test_keep_dtype_stores_bfloat16_and_loads_as_float32(tmp_path):
    hf_dir = tmp_path / "hf"
    write_hf(hf_dir, BASE)
    from safetensors.torch import load_file

    state = {k: v.to(torch.bfloat16) for k, v in load_file(str(hf_dir / "model.safetensors")).items()}
    save_file(state, str(hf_dir / "model.safetensors"))
    assert main(["hf", "import", str(hf_dir), "--out", str(tmp_path / "r"), "--keep-dtype"]) == 0
    stored = rundir.load_weights(tmp_path / "r" / "model.safetensors")
    assert all(t.dtype == torch.bfloat16 for t in stored.values())
    model, _ = rundir.load_model(tmp_path / "r")
    assert all(p.dtype == torch.float32 for p in model.parameters())
    torch.testing.assert_close(model.embed_tokens.weight,
                               state["model.embed_tokens.weight"].float(), rtol=0, atol=0)


def test_char_tokenizer_is_not_exported_and_probe_needs_ids(tmp_path, capsys):
    from depthlab.tokenizer import CharTokenizer

    run = _run_with(tmp_path)
    rundir.save_weights(run, Transformer(rundir.read_config(run)[0].model))
    assert main(["hf", "probe", str(run), "--prompt", "hello"]) == 2
    assert "give token ids with --ids" in capsys.readouterr().err
    CharTokenizer.train("hello world").save(run / "tokenizer.json")
    assert main(["hf", "export", str(run), "--out", str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "model.safetensors").exists()
    assert not (tmp_path / "hf" / "tokenizer.json").exists()  # a char tokenizer has no HF form
    capsys.readouterr()
    assert main(["hf", "probe", str(run), "--prompt", "hello", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_tokens"] == 5
