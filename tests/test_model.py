"""The model: causality, RoPE, residual wiring, parameter counts, init, every switch."""

import itertools
import math
from dataclasses import replace

import pytest
import torch

from depthlab.config import NORMS, PLACEMENTS, RESIDUALS, ModelConfig
from depthlab.errors import ConfigError
from depthlab.model import Transformer, apply_rope, rope_cos_sin
from depthlab.model.residual import NoResidual
from depthlab.presets import PRESETS, get_preset

TINY = ModelConfig(vocab_size=50, context_len=16, n_layers=2, d_model=16, n_heads=4)


def tiny(**changes) -> ModelConfig:
    return replace(TINY, **changes)


def valid_combinations():
    """Every norm x placement x FFN x residual x QK-norm x gate; value_residual and
    norm_scale ride along (qk xor gate; depth with swiglu), so each (norm, placement,
    residual) meets both values of each without multiplying the count by four."""
    for norm, placement, ffn, residual, qk, gate in itertools.product(
        NORMS, PLACEMENTS, ("relu", "gelu", "swiglu"), RESIDUALS, (False, True), (False, True)
    ):
        if norm == "none" and (placement != "pre" or qk):
            continue
        if residual == "deepnorm" and placement != "post":
            continue
        if residual == "ngpt" and (norm != "none" or ffn != "swiglu"):  # its own sphere, SwiGLU
            continue
        depth_ok = norm != "none" and placement in ("pre", "sandwich") and ffn == "swiglu"
        yield tiny(norm=norm, placement=placement, ffn=ffn, residual=residual, qk_norm=qk,
                   attn_gate=gate, final_norm=norm != "none", n_kv_heads=2,
                   value_residual=qk != gate, norm_scale="depth" if depth_ok else "none")


@pytest.mark.parametrize("cfg", list(valid_combinations()), ids=lambda c: (
    f"{c.norm}-{c.placement}-{c.ffn}-{c.residual}-qk{int(c.qk_norm)}-gate{int(c.attn_gate)}"
    f"-vr{int(c.value_residual)}-{c.norm_scale}"))
def test_every_switch_combination_runs_forward_and_backward(cfg):
    torch.manual_seed(0)
    model = Transformer(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, 7))
    logits = model(idx)
    assert logits.shape == (2, 7, cfg.vocab_size)
    logits.logsumexp(-1).mean().backward()
    assert torch.isfinite(logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.embed_tokens.weight.grad.abs().sum() > 0


ATTENTION_VARIANTS = [
    tiny(),
    tiny(n_kv_heads=1),
    tiny(qk_norm=True),
    tiny(attn_gate=True),
    tiny(position="learned"),
    tiny(placement="post", final_norm=False),
    tiny(head_dim=6),
]


@pytest.mark.parametrize("cfg", ATTENTION_VARIANTS)
@pytest.mark.parametrize("explicit", [False, True])
def test_causality(cfg, explicit):
    torch.manual_seed(0)
    model = Transformer(cfg)
    for block in model.blocks:
        block.attn.need_weights = explicit
    idx = torch.randint(0, cfg.vocab_size, (1, 10))
    base = model(idx)
    for t in (0, 4, 9):
        changed = idx.clone()
        changed[0, t] = (changed[0, t] + 1) % cfg.vocab_size
        out = model(changed)
        assert torch.equal(out[0, :t], base[0, :t]), f"position < {t} saw token {t}"
        assert not torch.allclose(out[0, t], base[0, t])


def test_explicit_attention_equals_sdpa():
    torch.manual_seed(0)
    model = Transformer(tiny(n_kv_heads=2, attn_gate=True)).double()
    idx = torch.randint(0, 50, (2, 9))
    fast = model(idx)
    for block in model.blocks:
        block.attn.need_weights = True
    assert torch.allclose(model(idx), fast, atol=1e-12)


def test_rope_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    E, T, shift = 8, 12, 5
    q, k = torch.randn(1, 1, 1, E, dtype=torch.float64), torch.randn(1, 1, 1, E, dtype=torch.float64)
    cos, sin = rope_cos_sin(T + shift, E, 10000.0, torch.float64, torch.device("cpu"))

    def score(i, j):
        qi = apply_rope(q, cos[i], sin[i])
        kj = apply_rope(k, cos[j], sin[j])
        return (qi * kj).sum().item()

    for i, j in [(3, 1), (7, 7), (11, 2)]:
        assert score(i, j) == pytest.approx(score(i + shift, j + shift), abs=1e-12)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-6)


def test_plain_residual_with_zeroed_sublayers_is_identity():
    torch.manual_seed(0)
    model = Transformer(tiny(residual="plain"))
    x = torch.randn(2, 6, 16)
    zero = lambda t, name: torch.zeros_like(t)
    writes = [(f"blocks.0.hook_{s}_write", zero) for s in ("attn", "mlp")]
    _, cache = model.run_with_cache(embeds=x, names=["blocks.0.hook_resid_pre",
                                                     "blocks.0.hook_resid_post"])
    with model.hooks(fwd=writes):
        _, cache = model.run_with_cache(embeds=x, names=["blocks.0.hook_resid_post"])
    assert torch.equal(cache["blocks.0.hook_resid_post"], x)
    # residual=none with the same zeroed writes loses the input entirely
    model.blocks[0].attn_residual = model.blocks[0].mlp_residual = NoResidual()
    with model.hooks(fwd=writes):
        _, cache = model.run_with_cache(embeds=x, names=["blocks.0.hook_resid_post"])
    assert torch.equal(cache["blocks.0.hook_resid_post"], torch.zeros_like(x))


def test_none_and_plain_differ_only_by_the_add():
    torch.manual_seed(0)
    plain = Transformer(tiny(residual="plain"))
    none = Transformer(tiny(residual="none"))
    none.load_state_dict(plain.state_dict())
    x = torch.randn(1, 5, 16)
    names = ["blocks.0.hook_attn_write", "blocks.0.hook_resid_mid"]
    _, cp = plain.run_with_cache(embeds=x, names=names)
    _, cn = none.run_with_cache(embeds=x, names=names)
    assert torch.allclose(cp["blocks.0.hook_attn_write"], cn["blocks.0.hook_attn_write"])
    assert torch.allclose(cp["blocks.0.hook_resid_mid"], x + cn["blocks.0.hook_resid_mid"])


def test_scaled_residual_divides_writes_by_sqrt_2L():
    torch.manual_seed(0)
    model = Transformer(tiny(residual="scaled", n_layers=8))
    _, cache = model.run_with_cache(embeds=torch.randn(1, 4, 16),
                                    names=["blocks.0.hook_attn_out", "blocks.0.hook_attn_write"])
    ratio = cache["blocks.0.hook_attn_write"] / cache["blocks.0.hook_attn_out"]
    assert torch.allclose(ratio, torch.full_like(ratio, 1 / math.sqrt(16)))


def norm_params(kind: str, dim: int) -> int:
    return {"none": 0, "layernorm": 2 * dim, "rmsnorm": dim, "rmsnorm_zero_centered": dim,
            "dyt": 2 * dim + 1}[kind]


def closed_form_params(m: ModelConfig) -> int:
    D, V, F, H, K, E = m.d_model, m.vocab_size, m.ffn_hidden, m.n_heads, m.kv_heads, m.head_size
    qkv_b = m.bias or m.qkv_bias
    q = D * H * E * (2 if m.attn_gate else 1) + (H * E * (2 if m.attn_gate else 1) if qkv_b else 0)
    kv = 2 * (D * K * E + (K * E if qkv_b else 0))
    o = H * E * D + (D if m.bias else 0)
    qk = 2 * norm_params(m.norm, E) if m.qk_norm else 0
    n_mats = 3 if m.ffn == "swiglu" else 2
    ffn = n_mats * D * F + ((n_mats - 1) * F + D if m.bias else 0)
    slots = {"pre": 1, "post": 1, "sandwich": 2, "output": 1}[m.placement]
    block = ffn + 2 * slots * norm_params(m.norm, D)
    # a Gated DeltaNet layer (transformers' Qwen3_5GatedDeltaNet): in_proj_qkv, z, b, a, the
    # depthwise conv over q, k, v, A_log and dt_bias per value head, the gated norm, out_proj
    nk, nv, dk, dv = m.linear_k_heads, m.linear_v_heads, m.linear_k_dim, m.linear_v_dim
    conv = 2 * nk * dk + nv * dv
    linear = (D * conv + D * nv * dv + 2 * D * nv + conv * m.linear_conv_kernel + 2 * nv + dv
              + nv * dv * D)
    mixers = sum(linear if kind == "gated_deltanet" else q + kv + o + qk
                 for kind in m.layer_kinds)
    total = V * D + m.n_layers * block + mixers
    total += m.context_len * D if m.position == "learned" else 0
    total += norm_params(m.norm, D) if m.final_norm else 0
    total += 0 if m.tie_embeddings else V * D
    return total


@pytest.mark.parametrize("name", list(PRESETS))
def test_parameter_counts_match_closed_form(name):
    m = get_preset(name).model
    model = Transformer(m)
    assert sum(p.numel() for p in model.parameters()) == closed_form_params(m)


def test_gpt2_small_has_124m_parameters():
    m = replace(get_preset("gpt2").model, vocab_size=50257, context_len=1024, n_layers=12,
                d_model=768, n_heads=12)
    assert closed_form_params(m) == 124_439_808
    from depthlab.model.summary import summarize
    assert summarize(m).total_params == 124_439_808


def test_course_init_stds():
    torch.manual_seed(0)
    cfg = replace(get_preset("course").model, d_model=256)  # more samples, tighter estimate
    model = Transformer(cfg)
    assert get_preset("course").model.out_proj_std == pytest.approx(0.00707, abs=1e-5)
    for block in model.blocks:
        assert block.attn.q_proj.weight.std().item() == pytest.approx(0.02, rel=0.03)
        assert block.attn.o_proj.weight.std().item() == pytest.approx(0.00707, rel=0.03)
        assert block.mlp.down_proj.weight.std().item() == pytest.approx(0.00707, rel=0.03)
    plain = Transformer(replace(cfg, scaled_init=False, init_gain=2.0))
    assert plain.blocks[0].attn.o_proj.weight.std().item() == pytest.approx(0.04, rel=0.03)


def test_tied_head_shares_the_embedding():
    model = Transformer(tiny(tie_embeddings=True))
    assert model.lm_head is None
    untied = Transformer(tiny(tie_embeddings=False))
    assert untied.lm_head.weight.shape == (50, 16)


def test_runs_in_float64():
    model = Transformer(tiny(qk_norm=True)).double()
    assert model(torch.randint(0, 50, (1, 5))).dtype == torch.float64


def test_model_rejects_invalid_config():
    with pytest.raises(ConfigError, match="model.n_heads"):
        Transformer(tiny(n_heads=5))
