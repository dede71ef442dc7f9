"""Gated DeltaNet in the stack: model.mixer and model.layer_pattern, their refusals, the
exact parameter count, the memory estimate, hook points, the qwen3_5 preset and a run that
trains and resumes bit for bit."""

from __future__ import annotations

import math
from dataclasses import fields, replace

import pytest
import torch
from train_helpers import config

from depthlab.config import (
    DELTANET_REFUSES,
    FFNS,
    NORM_SCALES,
    NORMS,
    PLACEMENTS,
    POSITIONS,
    RESIDUALS,
    ConfigError,
    ModelConfig,
    validate_model,
)
from depthlab.errors import UserError
from depthlab.memory import estimate
from depthlab.model import Transformer
from depthlab.model.deltanet import GatedDeltaNet
from depthlab.presets import get_preset
from depthlab.variants import MIXER_SPECS, SHORTCUT_SPECS, keys_where

HYBRID = ModelConfig(vocab_size=40, context_len=96, n_layers=4, d_model=32, n_heads=4,
                     mixer="gated_deltanet", layer_pattern="LA", linear_key_heads=2,
                     linear_value_heads=4, linear_conv_kernel=3)


def refusal(cfg: ModelConfig) -> str | None:
    try:
        validate_model(cfg)
    except ConfigError as e:
        return str(e)
    return None


@pytest.mark.parametrize("changes, field", [
    ({"linear_key_heads": 3, "linear_value_heads": 4}, "model.linear_value_heads=4"),
    ({"layer_pattern": "LAX"}, "model.layer_pattern='LAX' has the letter 'X'"),
    ({"layer_pattern": "la"}, "has the letter 'l'"),
    ({"layer_pattern": ""}, "model.layer_pattern is empty"),
    ({"layer_pattern": "LLLAL"}, "has 5 letters, more than model.n_layers=4"),
    ({"layer_pattern": "LLA"}, "its length must divide model.n_layers=4"),
    ({"mixer": "attention"}, "it needs model.mixer=gated_deltanet"),
    ({"mixer": "mamba", "layer_pattern": None}, "model.mixer='mamba' is not allowed"),
    ({"linear_conv_kernel": 0}, "model.linear_conv_kernel must be between 1 and"),
    ({"linear_key_dim": 0}, "model.linear_key_dim must be > 0"),
    ({"rope_fraction": 0.0}, "model.rope_fraction must be in (0, 1]"),
    ({"rope_fraction": 0.1}, "rotates 0 of 8 channels"),
    ({"position": "learned", "rope_fraction": 0.5}, "needs model.position=rope"),
])
def test_each_bad_mixer_field_is_refused_in_one_line_naming_it(changes, field):
    message = refusal(replace(HYBRID, **changes))
    assert message is not None and field in message and "\n" not in message


def variants_of(base: ModelConfig) -> list[tuple[str, ModelConfig]]:
    """Every value of every residual, norm, placement, FFN, position and norm-scale switch,
    the widened residuals at 3 streams, every boolean switch flipped and every stream
    shortcut on, one at a time: read from the config's choices and the spec tables."""
    out = [(f"residual={r}", replace(base, residual=r)) for r in RESIDUALS]
    out += [(f"norm={n}", replace(base, norm=n)) for n in NORMS]
    out += [(f"placement={p}", replace(base, placement=p)) for p in PLACEMENTS]
    out += [(f"ffn={f}", replace(base, ffn=f)) for f in FFNS]
    out += [(f"position={p}", replace(base, position=p, rope_fraction=1.0)) for p in POSITIONS]
    out += [(f"norm_scale={n}", replace(base, norm_scale=n)) for n in NORM_SCALES]
    out += [(f"residual={r},streams=3", replace(base, residual=r, streams=3))
            for r in keys_where(lambda s: s.widens_copies)]
    for f in fields(ModelConfig):
        if f.type in ("bool", bool):
            out.append((f"{f.name}={not getattr(base, f.name)}",
                        replace(base, **{f.name: not getattr(base, f.name)})))
    out += [(k, replace(base, **{k: 30.0 if s.off is None else True}))
            for k, s in SHORTCUT_SPECS.items()]
    return out


@pytest.mark.parametrize("name, cfg", variants_of(HYBRID), ids=lambda v: v if isinstance(v, str) else "")
def test_every_switch_composes_with_the_hybrid_or_is_refused_saying_why(name, cfg):
    """Valid: it builds, runs forward and backward to finite gradients, and its parameter
    count is exact. Refused: in one line; a refusal the all-attention model does not make
    names the DeltaNet and is one of DELTANET_REFUSES."""
    as_attention = refusal(replace(cfg, mixer="attention", layer_pattern=None))
    message = refusal(cfg)
    if message is not None:
        assert "\n" not in message
        if as_attention is None:
            assert "Gated DeltaNet" in message
            # a switch of DELTANET_REFUSES, or a residual whose spec DELTANET_REFUSES_RESIDUAL reads
            assert any(key in message for key in DELTANET_REFUSES) or "model.residual=" in message, message
        return
    torch.manual_seed(0)
    model = Transformer(cfg)
    if not cfg.on_sphere:  # nGPT's scales are counted by its own module
        assert cfg.approx_params == sum(p.numel() for p in model.parameters())
    idx = torch.randint(0, cfg.vocab_size, (2, 70))
    loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
    loss.backward()
    assert math.isfinite(loss.item())
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("changes", [{}, {"layer_pattern": None}, {"layer_pattern": "LLLA"},
                                     {"layer_pattern": "ALAL", "attn_gate": True, "qk_norm": True},
                                     {"linear_value_dim": 12, "linear_key_dim": 4,
                                      "linear_conv_kernel": 1, "bias": True}])
def test_the_parameter_count_is_the_built_models(changes):
    from depthlab.model.summary import count_parameters

    cfg = replace(HYBRID, **changes)
    model = Transformer(cfg)
    built = sum(p.numel() for p in model.parameters())
    assert cfg.approx_params == built == count_parameters(cfg).total
    per_kind = cfg.mixer_params
    for block in model.blocks:
        assert sum(p.numel() for p in block.attn.parameters()) == per_kind[block.mixer]


def test_the_layer_pattern_repeats_over_the_layers():
    cfg = replace(HYBRID, n_layers=8, layer_pattern="LLLA")
    model = Transformer(cfg)
    kinds = [type(b.attn).__name__ for b in model.blocks]
    assert kinds == ["GatedDeltaNet"] * 3 + ["Attention"] + ["GatedDeltaNet"] * 3 + ["Attention"]
    assert replace(HYBRID, layer_pattern=None).layer_kinds == ("gated_deltanet",) * 4
    assert set(MIXER_SPECS) == {"attention", "gated_deltanet"}


def test_hook_points_see_q_k_v_the_decay_beta_and_the_state():
    cfg = replace(HYBRID, layer_pattern=None)
    model = Transformer(cfg)
    names = [f"blocks.1.attn.hook_{n}" for n in ("q", "k", "v", "decay", "beta", "state_norm")]
    _, cache = model.run_with_cache(torch.randint(0, 40, (2, 70)), names=names)
    q, k, g, beta = (cache[f"blocks.1.attn.hook_{n}"] for n in ("q", "k", "decay", "beta"))
    assert q.shape == k.shape == (2, 4, 70, 8) and g.shape == beta.shape == (2, 4, 70)
    # L2-normalised with eps 1e-6 under the root: short vectors at init (|k|^2 ~ 1e-3) end
    # a few 1e-4 below 1
    assert torch.allclose(k.norm(dim=-1), torch.ones(2, 4, 70), atol=2e-3)
    assert torch.allclose(q.norm(dim=-1) * 8 ** 0.5, torch.ones(2, 4, 70), atol=2e-3)
    assert (g < 0).all() and ((beta > 0) & (beta < 1)).all()
    assert cache["blocks.1.attn.hook_state_norm"].shape == (2, 4, 2)  # one per chunk of 64


def test_a_deltanet_layers_memory_grows_linearly_with_the_context():
    """Attention keeps seq x seq scores per head; the DeltaNet's chunks keep C x C."""
    linear = replace(HYBRID, layer_pattern=None, context_len=4096)
    attention = replace(linear, mixer="attention")

    def growth(m: ModelConfig) -> float:
        return (estimate(m, 1, 4096, True).activations
                / estimate(m, 1, 1024, True).activations)
    assert growth(linear) < 4.5 < 10 < growth(attention)


def test_the_qwen3_5_preset_is_the_anchors_block_at_course_size():
    m = get_preset("qwen3_5").model
    assert m.layer_kinds == ("gated_deltanet",) * 3 + ("attention",)
    assert (m.norm, m.norm_eps, m.attn_gate, m.qk_norm) == ("rmsnorm_zero_centered", 1e-6, True, True)
    assert (m.n_layers, m.d_model) == (ModelConfig().n_layers, ModelConfig().d_model)
    assert m.linear_v_heads % m.linear_k_heads == 0 and m.linear_conv_kernel == 4
    model = Transformer(m)
    assert isinstance(model.blocks[0].attn, GatedDeltaNet) and model.blocks[3].attn.gated


@pytest.mark.slow
def test_the_qwen3_5_preset_trains_and_resumes_bit_for_bit(tmp_path):
    from test_train import weights_equal

    from depthlab.metrics import read_metrics
    from depthlab.train import train

    base = config(steps=8, ckpt_every=3, eval_every=4, probe_every=4, batch_size=4, seq_len=80)
    cfg = replace(get_preset("qwen3_5"), data=base.data, train=base.train)
    full = train(cfg, tmp_path / "full", progress=False)
    assert full.status == "completed"
    losses = [r["loss"] for r in read_metrics(tmp_path / "full", "train")]
    assert losses[-1] < losses[0]
    stopped = train(cfg, tmp_path / "split", progress=False, max_steps=5)
    assert stopped.status == "interrupted" and stopped.step == 5
    assert train(cfg, tmp_path / "split", progress=False, resume=True).step == 8
    assert weights_equal(tmp_path / "full", tmp_path / "split")
    assert ([r["loss"] for r in read_metrics(tmp_path / "split", "train")] == losses)


# ---- decode with the recurrent state cache ---------------------------------------------

@pytest.mark.parametrize("pattern, kernel", [(None, 4), ("LA", 2), ("LLLA", 3)])
def test_greedy_tokens_are_the_same_with_and_without_the_state_cache(pattern, kernel):
    """A 70-token prompt (past one chunk) runs chunked into the cache, then each new token
    runs the recurrent form from the conv and delta-rule states: the same 30 greedy tokens
    as recomputing the whole sequence every time."""
    from depthlab.generate import generate
    from depthlab.model.attention import KVCache
    from depthlab.model.deltanet import DeltaState

    cfg = replace(HYBRID, context_len=128, layer_pattern=pattern, linear_conv_kernel=kernel,
                  init_std=0.3)
    torch.manual_seed(7)
    model = Transformer(cfg).eval()
    prompt = torch.randint(0, 40, (70,), generator=torch.Generator().manual_seed(1)).tolist()
    with_cache = generate(model, prompt, 30, greedy=True, use_cache=True)
    assert with_cache == generate(model, prompt, 30, greedy=True, use_cache=False)
    assert len(set(with_cache)) > 3  # a varied stream, so equality is not a coincidence
    cache = KVCache(cfg, 1, 128, torch.float32, "cpu")
    states = [cache.layer(i) for i in range(cfg.n_layers)]
    assert [isinstance(s, DeltaState) for s in states] == [
        k == "gated_deltanet" for k in cfg.layer_kinds]
    assert cache.k.shape[0] == cfg.layer_kinds.count("attention")  # no K/V for DeltaNet layers


def test_decode_support_is_declared_from_the_mixer_specs():
    """The fused decode step computes the mixers whose spec says so; a DeltaNet model
    generates on the readable forward, with the reason naming the switch."""
    from depthlab.model.attention import KVCache
    from depthlab.model.decode import IMPLEMENTS, unsupported

    assert IMPLEMENTS["mixer"] == {k for k, s in MIXER_SPECS.items() if s.decode_step}
    model = Transformer(HYBRID)
    reason = unsupported(model, KVCache(HYBRID, 1, 8, torch.float32, "cpu"))
    assert reason is not None and "model.mixer=gated_deltanet" in reason


def test_a_deltanet_layer_asked_for_an_attention_map_says_it_has_none():
    model = Transformer(HYBRID)  # pattern LA: block 0 is a DeltaNet
    with pytest.raises(UserError) as e:
        model.run_with_cache(torch.randint(0, 40, (1, 5)), names=["blocks.0.attn.hook_pattern"])
    message = str(e.value)
    assert "\n" not in message and "blocks.0.attn is a GatedDeltaNet" in message
    assert "has no attention map" in message and "hook_decay" in message
    _, cache = model.run_with_cache(torch.randint(0, 40, (1, 5)),
                                    names=["blocks.1.attn.hook_pattern"])  # attention: has one
    assert cache["blocks.1.attn.hook_pattern"].shape == (1, 4, 5, 5)


def test_the_real_model_probes_read_attention_maps_from_the_attention_layers_only():
    """A hybrid's probes ask no DeltaNet layer for hook_pattern (it would refuse, above):
    its attention layers give the maps, its DeltaNet layers the mixing matrices."""
    from depthlab.probes.realmodel import realmodel_probes

    r = realmodel_probes(Transformer(HYBRID).eval(), [1, 2, 3, 4])
    kinds = HYBRID.layer_kinds
    assert r["attention"]["layers"] == [i for i, k in enumerate(kinds) if k == "attention"]
    assert r["deltanet_mixing"]["layers"] == [i for i, k in enumerate(kinds) if k != "attention"]
