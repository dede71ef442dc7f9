"""The hand-written training fast paths (depthlab.model.fused) compute what the readable
layers compute: values and gradients per function, whole models for every preset that
takes them, and whole training runs step for step.

Tolerances: the fast paths reorder float32 sums and compute GELU's tanh through a sigmoid,
so single values differ from the readable path by a few ulp (measured: up to 4.8e-7 on
GELU outputs of size <= 12; 5e-7 relative on gradients). Hence 1e-6 on values. Over a
training run AdamW divides each update by sqrt(v): where a gradient is rounding noise
(the key bias, whose gradient is exactly 0 in exact arithmetic: softmax ignores a shift
common to all keys) the noise itself is normalised into an update of size ~lr, so
weights are compared against how far training can move them, lr * steps: we allow
1e-3 of it (measured, 12 steps at lr 3e-3: losses within 7e-8 relative, weights within
4.4e-6 = 1.2e-4 of lr * steps). A real error (a sign, a missing term, the wrong half
rotated) changes gradients by O(1) and weights by ~lr per step (test below for RoPE).
"""

import dataclasses
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from train_helpers import cache, config  # noqa: F401 (cache: autouse fixture)

from depthlab.config import ModelConfig
from depthlab.metrics import read_metrics
from depthlab.model import Transformer, fused
from depthlab.model.attention import Attention, apply_rope
from depthlab.model.norms import NORM_CLASSES
from depthlab.model.support import undecided
from depthlab.presets import get_preset
from depthlab.train import train
from depthlab.train.checkpoint import load_latest


@pytest.fixture
def readable(monkeypatch):
    """Within the test, every layer takes its readable path."""
    def off() -> None:
        monkeypatch.setattr(fused, "fast_path_ok", lambda x: False)
    return off


def test_gelu_tanh_matches_torch_over_its_whole_range():
    x = torch.cat([torch.linspace(-12, 12, 20001), 3 * torch.randn(5000)]).requires_grad_()
    ours, theirs = fused.gelu_tanh(x), F.gelu(x, approximate="tanh")
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-6)
    g = torch.randn_like(ours)
    assert torch.equal(torch.autograd.grad(ours, x, g)[0], torch.autograd.grad(theirs, x, g)[0])


@pytest.mark.parametrize("shape", [(4, 7, 96), (2, 3, 5, 16), (3, 1000)])  # a stream; q heads
@pytest.mark.parametrize("scale", [1e-3, 1.0, 30.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rms_norm_matches_torch_values_and_gradients(shape, scale, dtype):
    """fused.rms_norm against F.rms_norm (autograd through its composite): the very same
    values (the forward runs the composite's ops in its order: training, inference and
    probes agree bit for bit), gradients within rounding of sums over 16-1000 terms."""
    torch.manual_seed(int(scale * 10) + len(shape))
    x = (scale * torch.randn(shape, dtype=dtype)).requires_grad_()
    w = (1 + 0.5 * torch.randn(shape[-1], dtype=dtype)).requires_grad_()
    ours, theirs = fused.rms_norm(x, w, 1e-5), F.rms_norm(x, shape[-1:], w, 1e-5)
    assert torch.equal(ours, theirs)
    g = torch.randn_like(ours)
    for a, b in zip(torch.autograd.grad(ours, (x, w), g), torch.autograd.grad(theirs, (x, w), g),
                    strict=True):
        torch.testing.assert_close(a, b, atol=1e-6 * max(1.0, b.abs().max().item()), rtol=1e-5)


@pytest.mark.parametrize("scale", [1e-4, 1.0, 50.0])  # eps dominant, unit RMS, large
def test_rms_norm_backward_against_finite_differences(scale):
    """Its backward is LayerNorm's kernel at mean 0 plus the mean term taken back out:
    float64 gradcheck, where eps dominates the RMS too, and with the gradient of w off."""
    torch.manual_seed(0)
    x = (scale * torch.randn(3, 5, 8, dtype=torch.float64)).requires_grad_()
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: fused.rms_norm(x, w, 1e-5), (x, w))
    assert torch.autograd.gradcheck(lambda x: fused.rms_norm(x, w.detach(), 1e-5), (x,))


def test_rms_norm_fast_path_only_where_it_applies(monkeypatch):
    """RMSNorm (and the zero-centred one, through its scale 1 + w) takes it while training
    on CPU in full precision; inference, half precision and a module whose
    `fused_fallback` is set (bench/step_cost.py --without rmsnorm) take F.rms_norm."""
    calls = []
    real = fused.rms_norm
    monkeypatch.setattr(fused, "rms_norm", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(2, 5, 16)
    for kind in ("rmsnorm", "rmsnorm_zero_centered"):
        norm = NORM_CLASSES[kind](16)
        out = norm(x)
        torch.testing.assert_close(out, norm.reference(x), atol=1e-6, rtol=1e-6)
        assert out.grad_fn is not None
        with torch.no_grad():
            norm(x)
        norm.to(torch.bfloat16)(x.to(torch.bfloat16))
        norm.float().fused_fallback = "off"
        norm(x)
    assert len(calls) == 2


@pytest.mark.parametrize("n_q,n_kv,E", [(4, 4, 32), (4, 2, 8), (6, 1, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rotary_heads_is_split_transpose_and_rope(n_q, n_kv, E, dtype):
    """From the projection with q's and k's rows in pairs, the function gives RoPE'd q, k
    with each head's dimensions in that paired order (p below), and v as it is."""
    B, T = 3, 11
    torch.manual_seed(n_q * E)
    y = torch.randn(B, T, (n_q + 2 * n_kv) * E, dtype=dtype, requires_grad=True)
    angles = torch.rand(T, E // 2, dtype=dtype) * 40
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    q, k, v = (t.unflatten(-1, (-1, E)).transpose(1, 2)
               for t in y.split([n_q * E, n_kv * E, n_kv * E], -1))
    want = apply_rope(q, cos, sin), apply_rope(k, cos, sin), v
    p = fused.pair_halves(torch.arange(E), 1)  # 0, E/2, 1, E/2 + 1, ...
    assert p.tolist() == [i // 2 + (i % 2) * (E // 2) for i in range(E)]
    wq, wk, wv = y.split([n_q * E, n_kv * E, n_kv * E], -1)
    paired = torch.cat([fused.pair_halves(wq.movedim(-1, 0), n_q).movedim(0, -1),
                        fused.pair_halves(wk.movedim(-1, 0), n_kv).movedim(0, -1), wv], -1)
    got = fused.rotary_heads(paired, cos, sin, n_q, n_kv)
    orders = (p, p, torch.arange(E))  # v keeps the head order
    for a, b, order in zip(got, want, orders, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b[..., order], atol=1e-6, rtol=1e-6)
    gs = [torch.randn_like(t) for t in want]
    g_got = torch.autograd.grad(got, y, [g[..., o] for g, o in zip(gs, orders, strict=True)])[0]
    g_want = torch.autograd.grad(want, y, gs)[0]
    torch.testing.assert_close(g_got, g_want, atol=1e-6, rtol=1e-6)
    if dtype == torch.float64:  # its hand-written backward against finite differences
        small = paired.detach()[:1, :4].requires_grad_()
        assert torch.autograd.gradcheck(
            lambda t: fused.rotary_heads(t, cos[:4], sin[:4], n_q, n_kv), (small,))


def model_outputs_and_grads(model: Transformer, idx: torch.Tensor):
    logits = model(idx)
    loss = F.cross_entropy(logits.flatten(0, 1), idx.roll(-1, 1).flatten())
    return logits.detach(), torch.autograd.grad(loss, list(model.parameters()))


NGPT = {"residual": "ngpt", "norm": "none", "final_norm": False}


@pytest.mark.parametrize("preset", ["course", "llama", "qwen3", "qwen_next", "olmo2", "gpt2",
                                    "ngpt"])
def test_models_compute_the_same_with_and_without_the_fast_paths(preset, readable):
    """Every preset, and nGPT on the course model (its per-dimension s_qk, set away from
    its init, read in the fused RoPE's paired order). nGPT's unit-norm q, k and scaled
    cosine logits amplify float32 rounding in its weight gradients (measured: 2e-4 of the
    largest on q_proj), so it is compared in float64, where the paths agree to 2e-13."""
    base = get_preset("course" if preset == "ngpt" else preset).model
    cfg = replace(base, vocab_size=50, value_residual=preset == "llama",
                  **(NGPT if preset == "ngpt" else {}))
    torch.manual_seed(3)
    dtype, tol = (torch.float64, 1e-10) if preset == "ngpt" else (torch.float32, 1e-6)
    model = Transformer(cfg).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("s_qk.weight"):
                p.uniform_(0.5, 2.0)
    idx = torch.randint(0, 50, (2, 24))
    logits, grads = model_outputs_and_grads(model, idx)
    readable()
    logits_r, grads_r = model_outputs_and_grads(model, idx)
    torch.testing.assert_close(logits, logits_r, atol=tol, rtol=tol)
    for a, b in zip(grads, grads_r, strict=True):
        torch.testing.assert_close(a, b, atol=tol * max(1.0, b.abs().max().item()), rtol=10 * tol)


def test_fast_path_only_where_it_applies(monkeypatch):
    """Training on CPU with no hook on q, k, v; inference, a hook, a cache, QK-norm or the
    output gate take the readable path (a hook sees what the lesson's code computes)."""
    calls = []
    real = fused.rotary_heads
    monkeypatch.setattr(fused, "rotary_heads", lambda *a, **k: calls.append(1) or real(*a, **k))
    cfg = replace(get_preset("course").model, vocab_size=40, n_layers=1)
    model = Transformer(cfg)
    idx = torch.randint(0, 40, (2, 8))
    model(idx)
    assert len(calls) == 1
    with torch.no_grad():
        model(idx)
    seen = []
    with model.hooks(fwd=[("blocks.0.attn.hook_k", lambda t, name: seen.append(t) or None)]):
        model(idx)
    assert len(calls) == 1 and seen[0].shape == (2, cfg.n_heads, 8, cfg.head_size)
    for switch in ({"qk_norm": True}, {"attn_gate": True}):
        Transformer(replace(cfg, **switch))(idx)
    assert len(calls) == 1


def test_every_config_field_has_a_fused_rope_story():
    """A new ModelConfig field fails here until fused.ROTARY_IMPLEMENTS says which of its
    values the fused RoPE computes or ROTARY_EXEMPT says it never reaches it (the walker
    of tests/test_decode.py, depthlab.model.support.undecided)."""
    assert undecided(fused.ROTARY_IMPLEMENTS, fused.ROTARY_EXEMPT) == []
    # the walker itself: an undeclared field, a stale name, a field with two stories
    fields = [f.name for f in dataclasses.fields(ModelConfig)]
    assert undecided({"n_heads": None}, {"nope"}) == [n for n in fields if n != "n_heads"] + ["nope"]
    assert undecided(dict.fromkeys(fields), {"n_heads"}) == ["n_heads"]


def test_the_fused_rope_decides_from_the_config_with_a_reason(monkeypatch):
    """Declared values take the fast path; any other value, or a non-default value of a
    field it does not declare, takes the readable one and says which switch."""
    cfg = replace(get_preset("course").model, vocab_size=40, n_layers=1)
    assert Attention(cfg).rotary_fallback is None
    assert Attention(replace(cfg, attn_gate=True)).rotary_fallback == (
        "model.attn_gate=True, which the fused RoPE path does not implement")
    assert Attention(replace(cfg, position="learned")).rotary_fallback == (
        "model.position=learned, which the fused RoPE path does not implement")
    calls = []
    real = fused.rotary_heads
    monkeypatch.setattr(fused, "rotary_heads", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.delitem(fused.ROTARY_IMPLEMENTS, "rope_theta")  # as if rope_theta were new
    idx = torch.randint(0, 40, (2, 8))
    Transformer(cfg)(idx)  # at its default: still computed
    assert len(calls) == 1
    other = replace(cfg, rope_theta=cfg.rope_theta * 2)
    model = Transformer(other)
    assert model.blocks[0].attn.rotary_fallback == (
        f"model.rope_theta={other.rope_theta}, which the fused RoPE path does not implement")
    model(idx)
    assert len(calls) == 1


def test_a_wrong_rotation_would_be_caught(monkeypatch):
    """The tolerances above are tight enough to see an error: rotating by -angle instead."""
    cfg = replace(get_preset("course").model, vocab_size=50, n_layers=1)
    idx = torch.randint(0, 50, (2, 24), generator=torch.Generator().manual_seed(1))

    def logits() -> torch.Tensor:
        torch.manual_seed(0)  # a fresh model: no rotation kept from an earlier call
        return Transformer(cfg)(idx)
    good = logits()
    real = fused.rotary_turns
    monkeypatch.setattr(fused, "rotary_turns", lambda cos, sin, heads: real(cos, -sin, heads))
    assert (logits() - good).abs().max() > 1e-4


def test_rotary_turns_are_kept_between_steps_and_follow_the_positions():
    """Attention keeps fused.rotary_turns while the model hands it the same cos, sin (every
    training step at one length) and derives them again when the length changes; the
    logits are those of a model that derives them on every call."""
    cfg = replace(get_preset("course").model, vocab_size=50, n_layers=2)
    torch.manual_seed(0)
    model, fresh = Transformer(cfg), Transformer(cfg)
    fresh.load_state_dict(model.state_dict())
    for T in (24, 24, 9, 24):
        idx = torch.randint(0, 50, (2, T), generator=torch.Generator().manual_seed(T))
        fresh._rope_kept = None
        for block in fresh.blocks:
            block.attn._rotary_turns = None
        out = model(idx)
        assert torch.equal(out, fresh(idx))
        kept = model.blocks[0].attn._rotary_turns
        assert kept[1][0].shape[0] == T and kept[0] is model.rope(T, out)


def test_positions_kept_from_inference_serve_a_training_step():
    """The cos, sin slice Transformer.rope keeps may first be cut under inference_mode (a
    generate or an evaluation before training): a training step on the same length then
    rotates and backpropagates through it, on the fused path and on the readable one."""
    cfg = replace(get_preset("course").model, vocab_size=50, n_layers=2)
    torch.manual_seed(0)
    model = Transformer(cfg)
    idx = torch.randint(0, 50, (2, 24), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        expected = model(idx)
    for fallback in (None, "the readable path"):
        for block in model.blocks:
            block.attn.rotary_fallback = fallback
        model.zero_grad()
        out = model(idx)
        out.square().mean().backward()
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
        assert all(p.grad is not None for p in model.parameters())


LR, STEPS = 3e-3, 12


def run_losses_and_weights(out, preset_model):
    cfg = config(steps=STEPS, lr=LR, warmup_steps=3, ckpt_every=12, eval_every=100,
                 probe_every=100)
    cfg = replace(cfg, model=replace(preset_model, n_layers=2, d_model=32, n_heads=2,
                                     context_len=64))
    train(cfg, out, overwrite=True, progress=False)
    losses = [r["loss"] for r in read_metrics(out) if r["kind"] == "train"]
    return losses, load_latest(out)[0].weights


@pytest.mark.parametrize("preset", ["course", "gpt2"])
def test_training_runs_step_for_step_the_same(preset, tmp_path, readable):
    """`depthlab train` with its fast paths and with the readable layers: the same losses
    at every step and the same weights after 12 AdamW steps with clipping and warmup."""
    model_cfg = get_preset(preset).model
    losses, weights = run_losses_and_weights(tmp_path / "fast", model_cfg)
    readable()
    losses_r, weights_r = run_losses_and_weights(tmp_path / "readable", model_cfg)
    assert len(losses) == STEPS
    assert losses == pytest.approx(losses_r, rel=1e-5, abs=0)
    moved = LR * STEPS  # AdamW moves a weight by at most ~lr per step
    for name, w in weights.items():
        torch.testing.assert_close(w, weights_r[name], atol=1e-3 * moved, rtol=0, msg=name)


@pytest.mark.parametrize("shape", [(12, 64, 128), (3, 1000)])
def test_rms_norm_forward_kernel_and_its_fallback_agree_bit_for_bit(shape, monkeypatch):
    """ATen's one-kernel RMSNorm forward (where torch has it) and the composite's ops the
    fused path falls back to give the same values and the same gradients, bit for bit."""
    torch.manual_seed(3)
    x = torch.randn(shape, requires_grad=True)
    w = (1 + 0.5 * torch.randn(shape[-1])).requires_grad_()
    g = torch.randn(shape)
    results = []
    for kernel in (fused._FUSED_RMS_FORWARD, None):
        monkeypatch.setattr(fused, "_FUSED_RMS_FORWARD", kernel)
        y = fused.rms_norm(x, w, 1e-5)
        results.append([y, *torch.autograd.grad(y, (x, w), g)])
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))
