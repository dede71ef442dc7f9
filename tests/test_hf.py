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
from depthlab.generate import generate  # noqa: E402
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
    for row, full in zip(prompt.tolist(), expected.tolist(), strict=True):
        assert generate(ours, row, 20, greedy=True) == full[5:]


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
    sizes = {"n_layers": 2, "d_model": 32, "n_heads": 4, "vocab_size": VOCAB, "context_len": 64,
             "init_std": 0.2}
    cfg = replace(cfg, model=replace(cfg.model, **(sizes | model_changes)))
    cfg = replace(cfg, train=replace(cfg.train, seq_len=32))
    torch.manual_seed(3)
    model = Transformer(cfg.model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.add_(0.3 * torch.randn_like(p))
            if name.endswith("in_proj_a.weight"):  # decays Transformers' float32 chunked
                p.mul_(0.1)  # form computes within 1e-4 (see test_hf_qwen3_5.perturb)
    rundir.write_config(run_dir, cfg)
    rundir.save_weights(run_dir, model)
    return model.eval()


@pytest.mark.parametrize("preset,changes,arch", [
    ("llama", {}, "LlamaForCausalLM"),
    ("tiny", {"n_kv_heads": 2}, "LlamaForCausalLM"),  # course init (scaled_init) exports too
    ("llama", {"bias": True, "head_dim": 16}, "LlamaForCausalLM"),
    ("llama", {"qkv_bias": True}, "Qwen2ForCausalLM"),
    ("qwen3", {}, "Qwen3ForCausalLM"),
    # Gated DeltaNet layers: the 3:1 pattern, every layer one, 3 value heads per key head
    ("qwen3_5", {"n_layers": 4}, "Qwen3_5ForCausalLM"),
    ("qwen3_5", {"layer_pattern": None, "linear_conv_kernel": 2, "linear_key_heads": 2,
                 "linear_value_heads": 6}, "Qwen3_5ForCausalLM"),
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
    with torch.no_grad():  # no cache: Transformers builds none for DeltaNet layers alone
        assert (hf(ids, use_cache=False).logits - model(ids)).abs().max() < 1e-4

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
    assert result["sublayers"] == ["0.attn", "0.mlp", "1.attn", "1.mlp", "2.attn", "2.mlp"]
    assert len(result["stream_rms"]) == len(result["rel_distance"]) == 2 * L + 1

    # Stream after each block = Transformers' hidden states (its last one is normed, so skip it).
    with torch.no_grad():
        states = hf(torch.tensor([ids]), output_hidden_states=True).hidden_states
    for i in range(L):
        expected = states[i].pow(2).mean().sqrt().item()
        assert result["stream_rms"][2 * i] == pytest.approx(expected, rel=1e-4)

    # Gradient reach: d(loss)/d(stream) at block 0's input, from a separate autograd pass.
    ours, _ = rundir.load_model(run)
    x = ours.embed(torch.tensor([ids])).detach().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(ours(embeds=x)[0, :-1], torch.tensor(ids[1:]))
    loss.backward()
    assert result["grad_norm"][0] == pytest.approx(x.grad.norm().item(), rel=1e-4)
    assert result["loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert result["per_layer"][-1] == 1.0 and result["ratio"] == result["per_layer"][0]
    from depthlab.probes.stream import probe_model

    fresh, _ = rundir.load_model(run)
    assert probe_model(fresh, ids)["grad_norm"] == result["grad_norm"]
    assert all(p.grad is None and p.requires_grad for p in fresh.parameters())  # left as found

    # Collapse on Transformers' embedding output, by the formulas.
    emb = states[0][0].double()
    centred = emb - emb.mean(0)
    assert result["rel_distance"][0] == pytest.approx((centred.norm() / emb.norm()).item(), rel=1e-6)
    unit = torch.nn.functional.normalize(emb, dim=-1)
    n = len(ids)
    assert result["mean_cosine"][0] == pytest.approx(((unit @ unit.T).sum().item() - n) / (n * (n - 1)), rel=1e-6)

    # The text report prints both tables.
    assert main(["hf", "probe", str(run), "--ids", ",".join(map(str, ids))]) == 0
    out = capsys.readouterr().out
    assert "Gradient of the mean next-token loss" in out and "mean cos" in out and "Skipping one block" in out
    assert main(["hf", "probe", str(run), "--ids", "5"]) == 2  # one token has no pairs


def test_export_copies_the_tokenizer(tmp_path):
    run, hf_dir = tmp_path / "run", tmp_path / "hf"
    _random_run(run, "llama")
    _bpe_tokenizer(run / "tokenizer.json")
    assert main(["hf", "export", str(run), "--out", str(hf_dir)]) == 0
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    from tokenizers import Tokenizer

    text = "the residual stream"
    assert tok(text)["input_ids"] == Tokenizer.from_file(str(run / "tokenizer.json")).encode(text).ids


def test_trained_run_exports(tmp_path, monkeypatch, capsys):
    """A run trained by `depthlab train` (BPE tokenizer) -> export -> same logits and tokens."""
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.txt"
    corpus.write_text("To be, or not to be, that is the question: whether tis nobler in "
                      "the mind to suffer the slings and arrows of outrageous fortune.\n" * 40)
    run, hf_dir = tmp_path / "run", tmp_path / "hf"
    assert main(["train", "--preset", "tiny", "--corpus", str(corpus), "--tokenizer", "bpe",
                 "--steps", "3", "--out", str(run), "--no-progress", "--threads", "1",
                 "--set", "data.bpe_vocab=256", "--set", "train.eval_every=3",
                 "--set", "train.eval_tokens=256"]) == 0
    assert main(["hf", "export", str(run), "--out", str(hf_dir)]) == 0
    ours, _ = rundir.load_model(run)
    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    ids = torch.randint(0, 256, (2, 40))
    with torch.no_grad():
        assert (hf(ids).logits - ours(ids)).abs().max() < 1e-4
    text = "whether tis nobler"
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    assert tok(text)["input_ids"] == rundir.load_tokenizer(run).encode(text)


def test_the_converter_reads_each_familys_tensor_names(tmp_path, monkeypatch):
    """Export and import name tensors by the family's own table (mapping.FAMILIES), not by
    Llama's: a family whose table says otherwise gets its own names both ways."""
    from depthlab.hf import mapping
    from depthlab.hf.weights import weight_files

    other = replace(mapping.LLAMA_NAMES, layer_prefix="transformer.h.",
                    top=(("embed_tokens.", "transformer.wte."), ("final_norm.", "transformer.ln_f."),
                         ("lm_head.", "lm_head.")))
    monkeypatch.setitem(mapping.FAMILIES, "qwen3", replace(mapping.FAMILIES["qwen3"], weights=other))
    run, hf_dir, back = tmp_path / "run", tmp_path / "hf", tmp_path / "back"
    model = _random_run(run, "qwen3")
    assert main(["hf", "export", str(run), "--out", str(hf_dir)]) == 0
    names = set(weight_files(hf_dir))
    assert "transformer.wte.weight" in names and "transformer.h.1.self_attn.q_norm.weight" in names
    assert not any(n.startswith("model.") for n in names)
    import_checkpoint(hf_dir, back)
    again, _ = rundir.load_model(back)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in again.state_dict().items())
