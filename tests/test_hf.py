"""Equivalence with Transformers: tiny random Llama, Qwen2 and Qwen3 checkpoints imported
into depthlab give the same logits and the same greedy continuation; depthlab runs
exported to the Hugging Face format load in Transformers with the same logits."""

import json
from dataclasses import replace

import pytest
import torch

transformers = pytest.importorskip("transformers")

from depthlab import rundir  # noqa: E402
from depthlab.cli import main  # noqa: E402
from depthlab.hf import import_checkpoint  # noqa: E402
from depthlab.model import Transformer  # noqa: E402
from depthlab.presets import get_preset  # noqa: E402

VOCAB = 97
HF = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
}


def tiny_hf(kind: str, tie: bool, seed: int = 0, **extra):
    """A random tiny checkpoint: GQA (4 query heads, 2 K/V heads), head_dim 16 != 48/4,
    rope theta 5000, eps 1e-5, weights ~ N(0, 0.2) so a wrong RoPE or norm shows."""
    config_cls, model_cls = HF[kind]
    cfg = config_cls(
        vocab_size=VOCAB, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
        initializer_range=0.2, rms_norm_eps=1e-5, tie_word_embeddings=tie,
        rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
        bos_token_id=None, eos_token_id=None, pad_token_id=None, **extra,
    )
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    with torch.no_grad():  # give norm scales and biases values, so a missing one shows
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.add_(0.3 * torch.randn_like(p))
    return model


def greedy(model: Transformer, ids: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        with torch.no_grad():
            nxt = model(ids)[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
    return ids


CASES = [
    ("llama", False, None),
    ("llama", True, "60KB"),  # sharded: read through model.safetensors.index.json
    ("qwen2", True, None),
    ("qwen2", False, None),
    ("qwen3", True, None),
    ("qwen3", False, "60KB"),
]


@pytest.mark.parametrize("kind,tie,shard", CASES)
def test_import_matches_transformers(tmp_path, kind, tie, shard):
    hf = tiny_hf(kind, tie)
    hf_dir, run = tmp_path / "hf", tmp_path / "run"
    hf.save_pretrained(hf_dir, **({"max_shard_size": shard} if shard else {}))
    assert (hf_dir / "model.safetensors.index.json").exists() == bool(shard)

    assert main(["hf", "import", str(hf_dir), "--out", str(run)]) == 0
    ours, cfg = rundir.load_model(run)
    m = cfg.model
    assert (m.qk_norm, m.qkv_bias, m.tie_embeddings) == (kind == "qwen3", kind == "qwen2", tie)
    assert (m.n_kv_heads, m.head_size, m.rope_theta, m.norm_eps) == (2, 16, 5000.0, 1e-5)

    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (3, 24))
    with torch.no_grad():
        theirs, mine = hf(ids).logits, ours(ids)
    assert theirs.std() > 1.0  # the weights are large enough for mistakes to show
    assert (theirs - mine).abs().max() < 1e-4

    prompt = ids[:2, :5]
    expected = hf.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0,
                           attention_mask=torch.ones_like(prompt))
    assert torch.equal(greedy(ours, prompt, 20), expected)


def test_older_config_spelling(tmp_path):
    """rope_theta at the top level (configs written before Transformers 5)."""
    hf = tiny_hf("llama", tie=False)
    hf_dir = tmp_path / "hf"
    hf.save_pretrained(hf_dir)
    raw = json.loads((hf_dir / "config.json").read_text())
    raw.pop("rope_parameters")
    raw["rope_theta"], raw["rope_scaling"] = 5000.0, None
    (hf_dir / "config.json").write_text(json.dumps(raw))
    import_checkpoint(hf_dir, tmp_path / "run")
    ours, cfg = rundir.load_model(tmp_path / "run")
    assert cfg.model.rope_theta == 5000.0
    ids = torch.arange(20).view(1, 20)
    with torch.no_grad():
        assert (hf(ids).logits - ours(ids)).abs().max() < 1e-4


def _random_run(run_dir, preset: str, **model_changes) -> Transformer:
    cfg = get_preset(preset)
    cfg = replace(cfg, model=replace(cfg.model, n_layers=2, d_model=32, n_heads=4, vocab_size=VOCAB,
                                     context_len=64, init_std=0.2, **model_changes))
    cfg = replace(cfg, train=replace(cfg.train, seq_len=32))
    torch.manual_seed(3)
    model = Transformer(cfg.model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.add_(0.3 * torch.randn_like(p))
    rundir.write_config(run_dir, cfg)
    rundir.save_weights(run_dir, model)
    return model.eval()


@pytest.mark.parametrize("preset,changes,arch", [
    ("llama", {}, "LlamaForCausalLM"),
    ("tiny", {"n_kv_heads": 2}, "LlamaForCausalLM"),  # course init (scaled_init) exports too
    ("llama", {"bias": True, "head_dim": 16}, "LlamaForCausalLM"),
    ("llama", {"qkv_bias": True}, "Qwen2ForCausalLM"),
    ("qwen3", {}, "Qwen3ForCausalLM"),
])
def test_export_round_trip(tmp_path, preset, changes, arch):
    run, hf_dir, back = tmp_path / "run", tmp_path / "hf", tmp_path / "back"
    model = _random_run(run, preset, **changes)
    assert main(["hf", "export", str(run), "--out", str(hf_dir)]) == 0
    raw = json.loads((hf_dir / "config.json").read_text())
    assert raw["architectures"] == [arch] and raw["torch_dtype"] == "float32"

    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    assert type(hf).__name__ == arch
    ids = torch.randint(0, VOCAB, (2, 30))
    with torch.no_grad():
        assert (hf(ids).logits - model(ids)).abs().max() < 1e-4

    import_checkpoint(hf_dir, back)
    again, _ = rundir.load_model(back)
    original, returned = model.state_dict(), again.state_dict()
    assert original.keys() == returned.keys()
    assert all(torch.equal(original[k], returned[k]) for k in original)


def _bpe_tokenizer(path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    text = ["the residual stream carries every write of every block"] * 20
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>"]))
    tok.save(str(path))


def test_probe_on_an_imported_model(tmp_path, capsys):
    """Probe numbers agree with Transformers' own hidden states and a direct autograd pass."""
    hf = tiny_hf("qwen3", tie=True)
    hf_dir, run = tmp_path / "hf", tmp_path / "run"
    hf.save_pretrained(hf_dir)
    _bpe_tokenizer(hf_dir / "tokenizer.json")
    assert main(["hf", "import", str(hf_dir), "--out", str(run)]) == 0
    assert (run / "tokenizer.json").read_bytes() == (hf_dir / "tokenizer.json").read_bytes()
    capsys.readouterr()

    prompt = "the residual stream carries every block"
    assert main(["hf", "probe", str(run), "--prompt", prompt, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(run / "tokenizer.json")).encode(prompt).ids
    assert result["prompt_ids"] == ids and len(ids) >= 4
    L = 3
    assert [w["write"] for w in result["stream_growth"]] == list(range(2 * L + 1))
    assert len(result["gradient_reach"]) == L and len(result["collapse"]) == L + 1

    # Stream RMS after each block = RMS of Transformers' hidden states (the last is normed there).
    with torch.no_grad():
        states = hf(torch.tensor([ids]), output_hidden_states=True).hidden_states
    rms = [w["rms"] for w in result["stream_growth"]]
    for i in range(L):
        assert rms[2 * i] == pytest.approx(states[i].pow(2).mean().sqrt().item(), rel=1e-4)

    # Gradient reach: d(loss)/d(stream) at block 0's input, from a separate autograd pass.
    ours, _ = rundir.load_model(run)
    x = ours.embed(torch.tensor([ids])).detach().requires_grad_(True)
    logits = ours(embeds=x)
    torch.nn.functional.cross_entropy(logits[0, :-1], torch.tensor(ids[1:])).backward()
    assert result["gradient_reach"][0]["grad_norm"] == pytest.approx(x.grad.norm().item(), rel=1e-4)
    assert all(g["grad_norm"] > 0 for g in result["gradient_reach"])
    assert result["loss"] == pytest.approx(
        torch.nn.functional.cross_entropy(logits[0, :-1], torch.tensor(ids[1:])).item(), rel=1e-5)

    # Collapse: both measures stay in range, and a stream
    # of identical tokens reads as fully collapsed.
    for c in result["collapse"]:
        assert 0 <= c["centred_ratio"] <= 1 + 1e-9 and -1 <= c["mean_cosine"] <= 1
    from depthlab.hf.probe import collapse

    same = torch.randn(1, 8).repeat(5, 1)
    ratio, cos = collapse(same)
    assert ratio < 1e-6 and cos == pytest.approx(1.0)
    ratio, cos = collapse(torch.eye(4))
    assert ratio == pytest.approx((3 / 4) ** 0.5) and cos == pytest.approx(0.0)

    # The text report prints the same three tables.
    assert main(["hf", "probe", str(run), "--ids", ",".join(map(str, ids))]) == 0
    out = capsys.readouterr().out
    assert "Residual stream RMS" in out and "Gradient norm" in out and "collapse" in out


def test_export_copies_the_tokenizer(tmp_path):
    run, hf_dir = tmp_path / "run", tmp_path / "hf"
    _random_run(run, "llama")
    _bpe_tokenizer(run / "tokenizer.json")
    assert main(["hf", "export", str(run), "--out", str(hf_dir)]) == 0
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    from tokenizers import Tokenizer

    text = "the residual stream"
    assert tok(text)["input_ids"] == Tokenizer.from_file(str(run / "tokenizer.json")).encode(text).ids
