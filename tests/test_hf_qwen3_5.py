"""Qwen3.5's text trunk against Transformers: tiny random Qwen3_5ForCausalLM checkpoints
(Gated DeltaNet and gated attention layers) import with the same logits and the same
greedy tokens, with and without the cache; a checkpoint with a vision tower imports its
language model and says so; exports load back in Transformers with the same logits."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "Qwen3_5TextConfig"):  # pragma: no cover
    pytest.skip("transformers has no Qwen3.5 (needs 5.x)", allow_module_level=True)

from depthlab import rundir  # noqa: E402
from depthlab.cli import main  # noqa: E402
from depthlab.errors import UserError  # noqa: E402
from depthlab.generate import generate  # noqa: E402
from depthlab.hf import export_run, import_checkpoint  # noqa: E402

VOCAB = 97
FULL, LINEAR = "full_attention", "linear_attention"


def text_fields(layers: list[str], kernel: int, k_heads: int, v_heads: int, partial: float,
                tie: bool) -> dict:
    """A tiny trunk: GQA attention (4 heads, 2 K/V, head_dim 16), DeltaNet key / value head
    sizes 8 / 12, weights ~ N(0, 0.2) so a wrong conv, norm or rotation shows."""
    return dict(vocab_size=VOCAB, hidden_size=48, intermediate_size=80,
                num_hidden_layers=len(layers), num_attention_heads=4, num_key_value_heads=2,
                head_dim=16, max_position_embeddings=160, initializer_range=0.2,
                rms_norm_eps=1e-5, tie_word_embeddings=tie,
                rope_parameters={"rope_type": "default", "rope_theta": 5000.0,
                                 "partial_rotary_factor": partial},
                linear_num_key_heads=k_heads, linear_num_value_heads=v_heads,
                linear_key_head_dim=8, linear_value_head_dim=12, linear_conv_kernel_dim=kernel,
                layer_types=layers, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def perturb(model: torch.nn.Module) -> torch.nn.Module:
    """Norm scales away from their init, so a missing or misplaced one shows; in_proj_a at
    std 0.02. With it at 0.2 the decays swing between -50 and -0.2 a token inside one
    head, the log-decay sums of a chunk reach -1,000, and Transformers' float32 G_i - G_j
    loses ~1e-4 of the decays between tokens: measured at one layer, 6e-5 from the exact
    recurrence where depthlab's chunked form (its sums in float64) is 2e-6, which through
    four layers exceeds the 1e-4 asked of the logits (tests/test_deltanet.py holds our
    chunked form to the recurrence at any decay)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
            if name.endswith("in_proj_a.weight"):
                p.mul_(0.1)
    return model.eval()


def tiny_hf(layers: list[str], kernel: int = 4, k_heads: int = 2, v_heads: int = 4,
            partial: float = 0.25, tie: bool = False, seed: int = 0):
    cfg = transformers.Qwen3_5TextConfig(**text_fields(layers, kernel, k_heads, v_heads,
                                                       partial, tie))
    torch.manual_seed(seed)
    return perturb(transformers.Qwen3_5ForCausalLM(cfg))


# (layer kinds, conv kernel, key heads, value heads, partial RoPE, tied, tokens): key heads
# != value heads, the 3:1 pattern and others, every layer DeltaNet, conv kernels 2-4, and
# sequences below, past and not a multiple of the chunk of 64.
CASES = [
    ([LINEAR, FULL] * 2, 3, 2, 4, 0.5, False, 70),
    ([LINEAR] * 3 + [FULL], 4, 2, 6, 0.25, True, 130),
    ([LINEAR] * 3, 2, 2, 2, 0.25, False, 65),
    ([FULL, LINEAR, LINEAR], 4, 1, 3, 1.0, False, 23),
]


def imported(tmp_path, hf):
    hf_dir, run = tmp_path / "hf", tmp_path / "run"
    hf.save_pretrained(hf_dir)
    assert main(["hf", "import", str(hf_dir), "--out", str(run)]) == 0
    return rundir.load_model(run)


@pytest.mark.parametrize("layers,kernel,k_heads,v_heads,partial,tie,tokens", CASES)
def test_import_matches_transformers(tmp_path, capsys, layers, kernel, k_heads, v_heads,
                                     partial, tie, tokens):
    hf = tiny_hf(layers, kernel, k_heads, v_heads, partial, tie)
    ours, cfg = imported(tmp_path, hf)
    m = cfg.model
    assert [k == "gated_deltanet" for k in m.layer_kinds] == [k == LINEAR for k in layers]
    assert (m.linear_k_heads, m.linear_v_heads, m.linear_conv_kernel, m.rope_fraction) == (
        k_heads, v_heads, kernel, partial)
    assert "Gated DeltaNet" in capsys.readouterr().out
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (2, tokens))
    with torch.no_grad():
        theirs, mine = hf(ids, use_cache=False).logits, ours(ids)
    assert theirs.std() > 1.0  # the weights are large enough for mistakes to show
    assert (theirs - mine).abs().max() < 1e-4


@pytest.mark.parametrize("layers,kernel", [([LINEAR] * 3 + [FULL], 4), ([LINEAR, FULL], 2)])
def test_greedy_tokens_match_transformers_with_the_cache(tmp_path, layers, kernel):
    """Transformers' generate (its dynamic cache: conv and recurrent states) and ours, with
    the state cache and without: the same 20 greedy tokens after a 70-token prompt."""
    hf = tiny_hf(layers, kernel)
    ours, _ = imported(tmp_path, hf)
    prompt = torch.randint(0, VOCAB, (1, 70), generator=torch.Generator().manual_seed(2))
    expected = hf.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0,
                           attention_mask=torch.ones_like(prompt))[0, 70:].tolist()
    row = prompt[0].tolist()
    assert generate(ours, row, 20, greedy=True, use_cache=True) == expected
    assert generate(ours, row, 20, greedy=True, use_cache=False) == expected


def test_a_checkpoint_with_a_vision_tower_imports_its_text_trunk(tmp_path, capsys):
    text = text_fields([LINEAR, FULL], 4, 2, 4, 0.25, False)
    vision = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
              "out_hidden_size": 48}
    cfg = transformers.Qwen3_5Config(text_config=text, vision_config=vision,
                                     tie_word_embeddings=False)
    torch.manual_seed(0)
    hf = perturb(transformers.Qwen3_5ForConditionalGeneration(cfg))
    ours, run_cfg = imported(tmp_path, hf)
    out = capsys.readouterr().out
    assert "the text model only" in out and "model.visual left out" in out
    assert run_cfg.model.layer_pattern == "LA"
    ids = torch.randint(0, VOCAB, (1, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (hf(input_ids=ids).logits - ours(ids)).abs().max() < 1e-4


def _run_of(tmp_path, changes: dict):
    from test_hf import _random_run

    return _random_run(tmp_path / "run", "qwen3_5", **changes)


@pytest.mark.parametrize("changes, says", [
    ({"n_layers": 4, "norm": "rmsnorm"}, "model.norm=\"rmsnorm\" has no Hugging Face equivalent "
                                         "(Qwen3.5 scales by (1 + w))"),
    ({"n_layers": 4, "qk_norm": False}, "model.qk_norm=false has no Hugging Face equivalent"),
    ({"n_layers": 4, "attn_gate": False}, "model.attn_gate=false has no Hugging Face"),
    ({"n_layers": 4, "residual": "scaled"}, "model.residual=\"scaled\" has no Hugging Face"),
])
def test_a_hybrid_export_cannot_write_is_refused_by_name(tmp_path, changes, says):
    _run_of(tmp_path, changes)
    with pytest.raises(UserError) as e:
        export_run(tmp_path / "run", tmp_path / "hf")
    assert says in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "hf").exists()


def test_the_export_writes_transformers_layer_types_and_partial_rope(tmp_path):
    model = _run_of(tmp_path, {"n_layers": 8})
    export_run(tmp_path / "run", tmp_path / "hf")
    raw = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert raw["model_type"] == "qwen3_5_text"  # the text model: "qwen3_5" is the multimodal one
    assert raw["layer_types"] == ([LINEAR] * 3 + [FULL]) * 2
    assert raw["rope_parameters"]["partial_rotary_factor"] == model.cfg.rope_fraction == 0.25
    back = import_checkpoint(tmp_path / "hf", tmp_path / "back").config.model
    assert back.layer_pattern == "LLLA" and back.mixer == "gated_deltanet"
