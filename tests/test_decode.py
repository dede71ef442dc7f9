"""DecodeStep, generate's one-token fast path, computes what the readable forward computes:
the same logits and the same cache contents for every switch of the model; it steps
aside for hooks, for the residuals and norms it does not handle, and for large models."""

from dataclasses import replace

import pytest
import torch
from torch.nn.modules import module as nn_module

import depthlab.model.decode as decode
from depthlab.generate import _Stepper, generate
from depthlab.model import Transformer
from depthlab.model.attention import KVCache
from depthlab.model.decode import DecodeStep, unsupported
from depthlab.model.support import undecided
from depthlab.presets import get_preset

SIZES = {"vocab_size": 97, "context_len": 40, "d_model": 32, "n_heads": 4, "init_std": 0.3}

# One switch at a time away from the course model, then the presets: every norm and
# placement, every single-stream residual, every FFN, GQA, QK-norm (both RMSNorms), the
# output gate, the value residual, learned positions, biases, untied heads, LayerNorm Scaling.
SWITCHES = [
    {}, {"norm": "layernorm"}, {"norm": "rmsnorm_zero_centered"}, {"norm": "dyt"},
    {"norm": "none", "final_norm": False}, {"placement": "post"}, {"placement": "sandwich"},
    {"placement": "output"}, {"residual": "none"}, {"residual": "scaled"},
    {"residual": "rezero"}, {"residual": "deepnorm", "placement": "post"}, {"ffn": "relu"},
    {"ffn": "gelu"}, {"ffn_clamp": 0.5}, {"n_kv_heads": 2}, {"n_kv_heads": 1},
    {"qk_norm": True}, {"qk_norm": True, "norm": "rmsnorm_zero_centered", "n_kv_heads": 2},
    {"attn_gate": True, "bias": True}, {"attn_gate": True, "qkv_bias": True, "n_kv_heads": 2},
    {"value_residual": True}, {"position": "learned"}, {"bias": True}, {"qkv_bias": True},
    {"tie_embeddings": False}, {"norm_scale": "depth"}, {"final_norm": False},
    {"head_dim": 12, "n_kv_heads": 2},
    # the stream shortcuts the step computes (a cap of 2 bites on logits of a few units)
    {"x0_mix": True}, {"backout": True}, {"unet_skips": True}, {"logit_softcap": 2.0},
    {"x0_mix": True, "backout": True, "unet_skips": True, "logit_softcap": 15.0,
     "value_residual": True, "n_layers": 5},
]
PRESETS = ["gpt2", "vaswani2017", "llama", "qwen3", "qwen_next", "olmo2"]


def model_for(preset: str, seed: int, **changes) -> Transformer:
    """A small model whose every parameter is away from its init (rezero's alphas and the
    norms' scales would otherwise hide a mistake behind zeros and ones)."""
    cfg = replace(get_preset(preset).model, **(SIZES | changes))
    torch.manual_seed(seed)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim < 2:
                p.add_(0.3 * torch.randn_like(p))
    return model


def readable_and_fast(model: Transformer, prompt: torch.Tensor, n_steps: int):
    """Logits of each new token by the model's forward and by DecodeStep, each with its own
    cache, feeding both the readable path's greedy token; the logits of one full pass over
    the same tokens; and the two caches."""
    caches = [KVCache(model.cfg, 1, model.cfg.context_len, torch.float32, "cpu") for _ in "ab"]
    with torch.inference_mode():
        model(prompt, cache=caches[0])
        model(prompt, cache=caches[1])
        step = DecodeStep(model, caches[1])
        tokens = [int(model(prompt)[0, -1].argmax())]
        readable, fast = [], []
        for _ in range(n_steps):
            readable.append(model(torch.tensor([tokens[-1:]]), cache=caches[0])[0, -1])
            fast.append(step(tokens[-1]))
            tokens.append(int(readable[-1].argmax()))
        sequence = torch.cat([prompt, torch.tensor([tokens[:-1]])], dim=1)
        full = model(sequence)[0, prompt.shape[1]:]
    return torch.stack(readable), torch.stack(fast), full, caches


def assert_within_the_rounding_spread(fast: torch.Tensor, readable: torch.Tensor,
                                      full: torch.Tensor) -> None:
    """The fast step differs from the readable cached step by float32 rounding only: by no
    more than the readable cached step itself differs from a full pass over the sequence
    (measured over every switch: 0.6x to 1.7x of that spread), with a floor of 1e-6 of the
    logits' size (without a norm they grow into the hundreds)."""
    scale = float(readable.abs().max())
    spread = max(float((readable - full).abs().max()), 1e-6 * scale)
    assert float((fast - readable).abs().max()) <= 4 * spread


@pytest.mark.parametrize("changes", SWITCHES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "course")
def test_decode_step_matches_the_readable_forward_for_every_switch(changes):
    model = model_for("course", 3, **changes)
    assert unsupported(model, KVCache(model.cfg, 1, 8, torch.float32, "cpu")) is None
    prompt = torch.randint(0, 97, (1, 5), generator=torch.Generator().manual_seed(1))
    readable, fast, full, (cache_a, cache_b) = readable_and_fast(model, prompt, 30)
    assert readable.std() > 0.05  # logits that carry information, not a constant
    assert_within_the_rounding_spread(fast, readable, full)
    assert cache_a.length == cache_b.length == 35
    for a, b in ((cache_a.k, cache_b.k), (cache_a.v, cache_b.v)):  # at most 1.3e-5 measured
        torch.testing.assert_close(b, a, rtol=0, atol=5e-5 * float(a.abs().max()))


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("seed", [2, 19])
def test_decode_step_matches_the_readable_forward_for_every_preset(preset, seed):
    model = model_for(preset, seed)
    prompt = torch.randint(0, 97, (1, 3), generator=torch.Generator().manual_seed(seed))
    readable, fast, full, _ = readable_and_fast(model, prompt, 36)  # up to the full context
    assert_within_the_rounding_spread(fast, readable, full)


@pytest.mark.parametrize("changes,reason", [
    ({"residual": "hc", "streams": 2}, "model.residual=hc, which the decode step does not"),
    ({"residual": "mhc", "streams": 4}, "model.residual=mhc, which the decode step does not"),
    ({"residual": "attnres"}, "model.residual=attnres, which the decode step does not"),
    ({"residual": "ngpt", "norm": "none", "final_norm": False},
     "model.residual=ngpt, which the decode step does not"),
    ({"residual": "ngpt", "norm": "none", "final_norm": False, "n_kv_heads": 2},
     "model.residual=ngpt, which the decode step does not"),  # s_qk after the K/V repeat
    ({"qk_norm": True, "norm": "layernorm"}, "QK-norm other than RMSNorm"),
    ({"value_embeds": True}, "model.value_embeds=True, which the decode step does not"),
    ({"smear": True}, "model.smear=True, which the decode step does not"),
    ({"smear": True, "value_embeds": True, "x0_mix": True, "n_layers": 3},
     "model.value_embeds=True, which the decode step does not"),
])
def test_models_the_step_does_not_handle_generate_the_same_tokens_on_the_readable_path(
        changes, reason):
    model = model_for("course", 4, **changes)
    assert reason in unsupported(model, KVCache(model.cfg, 1, 8, torch.float32, "cpu"))
    prompt = [3, 1, 4, 1, 5]
    assert (generate(model, prompt, 30, greedy=True, use_cache=True)
            == generate(model, prompt, 30, greedy=True, use_cache=False))


def test_half_precision_and_batched_caches_are_refused():
    model = model_for("course", 0)
    assert "more than one sequence" in unsupported(model, KVCache(model.cfg, 2, 8, torch.float32,
                                                                  "cpu"))
    model = model.to(torch.bfloat16)
    assert "bfloat16" in unsupported(model, KVCache(model.cfg, 1, 8, torch.bfloat16, "cpu"))


def test_a_model_above_the_copy_limit_generates_on_the_readable_path(monkeypatch):
    model = model_for("llama", 5)
    cache = KVCache(model.cfg, 1, 8, torch.float32, "cpu")
    assert unsupported(model, cache) is None
    monkeypatch.setattr(decode, "WEIGHT_COPY_LIMIT", 1000)
    assert "copy of its weights" in unsupported(model, cache)
    with_cache = generate(model, [7, 8, 9], 25, greedy=True)
    monkeypatch.undo()
    assert with_cache == generate(model, [7, 8, 9], 25, greedy=True)
    assert with_cache == generate(model, [7, 8, 9], 25, greedy=True, use_cache=False)


def test_hooks_see_every_cached_step_and_change_no_token():
    model = model_for("course", 6)
    seen = []

    def record(t, name):
        seen.append(tuple(t.shape))

    plain = generate(model, [1, 2, 3, 4], 12, greedy=True)
    with model.hooks(fwd=[("blocks.1.hook_resid_post", record)]):
        hooked = generate(model, [1, 2, 3, 4], 12, greedy=True)
    assert hooked == plain
    assert seen == [(1, 4, 32)] + [(1, 1, 32)] * 11  # the prompt, then one token per step


def test_a_hook_attached_part_way_through_sees_every_later_step(monkeypatch):
    model = model_for("course", 6)
    seen, handles = [], []
    fast_step = DecodeStep.__call__

    def step_then_attach(self, token):
        logits = fast_step(self, token)
        if self.cache.length == 8:  # 4 prompt tokens, then 4 fast steps
            handles.append(model.blocks[0].hook_resid_post.register_forward_hook(
                lambda module, args, out: seen.append(tuple(out.shape))))
        return logits

    monkeypatch.setattr(DecodeStep, "__call__", step_then_attach)
    try:
        cached = generate(model, [1, 2, 3, 4], 12, greedy=True)
    finally:
        handles[0].remove()
    assert seen == [(1, 1, 32)] * 7  # the steps at positions 8..14, on the readable path
    assert cached == generate(model, [1, 2, 3, 4], 12, greedy=True, use_cache=False)


def test_sampling_on_the_fast_path_repeats_under_a_seed():
    model = model_for("qwen3", 10)
    runs = [generate(model, [4, 5], 40, temperature=1.2, seed=s) for s in (7, 7, 8)]
    assert runs[0] == runs[1] != runs[2]


def test_a_hook_that_replaces_a_value_changes_the_cached_generation():
    model = model_for("course", 7)
    prompt = [5, 6, 7]
    plain = generate(model, prompt, 15, greedy=True)
    with model.hooks(fwd=[("blocks.0.hook_mlp_out", lambda t, name: t * 0)]):
        cached = generate(model, prompt, 15, greedy=True)
        uncached = generate(model, prompt, 15, greedy=True, use_cache=False)
    assert cached == uncached != plain


def test_any_forward_hook_sends_the_step_back_to_the_readable_path():
    model = model_for("course", 8)
    step = DecodeStep(model, KVCache(model.cfg, 1, 8, torch.float32, "cpu"))
    assert not step.hooks_attached()
    handle = model.blocks[1].mlp.down_proj.register_forward_pre_hook(lambda m, args: None)
    assert step.hooks_attached()
    handle.remove()
    assert not step.hooks_attached()
    handle = nn_module.register_module_forward_hook(lambda m, args, out: None)
    try:
        assert step.hooks_attached()
    finally:
        handle.remove()
    assert not step.hooks_attached()


def test_a_full_cache_says_so():
    model = model_for("course", 0)
    cache = KVCache(model.cfg, 1, 4, torch.float32, "cpu")
    with torch.inference_mode():
        model(torch.zeros(1, 4, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="holds 4 tokens"):
            DecodeStep(model, cache)(1)


def test_logits_to_keep_gives_the_last_positions_of_the_full_pass():
    model = model_for("course", 9)
    idx = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(idx)
        last = model(idx, logits_to_keep=1)
        three = model(idx, logits_to_keep=3)
    assert last.shape == (2, 1, 97) and three.shape == (2, 3, 97)
    torch.testing.assert_close(last, full[:, -1:])
    torch.testing.assert_close(three, full[:, -3:])


def test_every_config_field_has_a_decode_story():
    """A new ModelConfig field fails here until decode.IMPLEMENTS says which of its values
    the step computes (or that it only sets where the weights start: ANY); the walker is
    depthlab.model.support's, shared with the fused paths (tests/test_fused.py)."""
    assert undecided(decode.IMPLEMENTS) == []


def test_a_switch_the_step_does_not_declare_falls_back_with_its_name(monkeypatch):
    model = model_for("course", 11, qk_norm=True)
    cache = KVCache(model.cfg, 1, 8, torch.float32, "cpu")
    assert unsupported(model, cache) is None
    monkeypatch.delitem(decode.IMPLEMENTS, "qk_norm")  # as if qk_norm were new
    assert unsupported(model, cache) == "model.qk_norm=True, which the decode step does not implement"
    plain = model_for("course", 11)  # the undeclared field at its default changes nothing
    assert unsupported(plain, KVCache(plain.cfg, 1, 8, torch.float32, "cpu")) is None


def test_a_subclass_of_a_known_module_falls_back():
    model = model_for("course", 12)

    class Softer(type(model.blocks[0].mlp)):
        pass

    model.blocks[0].mlp.__class__ = Softer
    assert "class Softer" in unsupported(model, KVCache(model.cfg, 1, 8, torch.float32, "cpu"))


def test_a_readable_forward_the_step_does_not_know_generates_the_readable_tokens(monkeypatch):
    """A logit softcap added to unembed only (no config switch): the step cannot know it;
    its first token is checked against the readable forward, found different and dropped,
    so the cached generation samples exactly what the readable path samples."""
    model = model_for("course", 13)
    unembed = Transformer.unembed
    monkeypatch.setattr(Transformer, "unembed", lambda self, x: 0.5 * torch.tanh(unembed(self, x) / 0.5))
    prompt = [2, 7, 1, 8]
    cache = KVCache(model.cfg, 1, 30, torch.float32, "cpu")
    stepper = _Stepper(model, cache, 20, torch.device("cpu"))
    assert stepper.dropped is None and stepper.step is not None  # the config says nothing
    with torch.inference_mode():
        seq = list(prompt)
        for _ in range(3):
            logits = stepper(seq)
            assert float(logits.abs().max()) <= 0.5
            seq.append(int(logits.argmax()))
    assert stepper.step is None and "differs from the readable forward" in stepper.dropped
    sampled = [generate(model, prompt, 20, temperature=1.0, seed=s) for s in (3, 4)]
    assert sampled == [generate(model, prompt, 20, temperature=1.0, seed=s, use_cache=False)
                       for s in (3, 4)]


def test_the_first_step_check_keeps_the_step_when_it_agrees():
    model = model_for("qwen3", 14)
    cache = KVCache(model.cfg, 1, 30, torch.float32, "cpu")
    stepper = _Stepper(model, cache, 20, torch.device("cpu"))
    with torch.inference_mode():
        seq = [3, 3, 4]
        for _ in range(5):
            seq.append(int(stepper(seq).argmax()))
    assert stepper.checked and stepper.step is not None and stepper.dropped is None
    assert cache.length == len(seq) - 1


def test_agreement_is_rounding_not_a_change_of_computation():
    readable = torch.tensor([3.0, -1.0, 0.25])
    assert decode.agrees(readable + 1e-6, readable)
    assert not decode.agrees(readable + 0.01, readable)
    assert not decode.agrees(torch.tensor([3.0, float("nan"), 0.25]), readable)


def test_a_kept_step_serves_the_next_call_until_a_weight_changes(monkeypatch):
    """generate keeps the last model's DecodeStep (its copies of the weights) for the next
    call on the same unchanged model; an in-place change of any weight (an optimizer step)
    or another model builds a new one, and every call's tokens are those of the full
    forward per token. SmolLM2's shape in small: GQA 3:1, tied head, rope theta 1e5."""
    built = []
    real_init = DecodeStep.__init__
    monkeypatch.setattr(DecodeStep, "__init__",
                        lambda self, *a: built.append(1) or real_init(self, *a))
    model = model_for("llama", 5, n_heads=6, n_kv_heads=2, d_model=48, tie_embeddings=True,
                      rope_theta=100_000.0)
    prompt = [3, 1, 4, 1, 5]

    def same_as_full(ids: list[int], n: int) -> list[int]:
        cached = generate(model, ids, n, greedy=True)
        assert cached == generate(model, ids, n, greedy=True, use_cache=False)
        return cached

    first = same_as_full(prompt, 20)
    assert len(built) == 1
    assert same_as_full(prompt, 20) == first and len(built) == 1  # kept, bound to a new cache
    assert same_as_full(prompt + first[:3], 12) == first[3:15] and len(built) == 1
    with torch.no_grad():
        model.blocks[1].mlp.down_proj.weight.mul_(1.5)  # as an optimizer step would
    same_as_full(prompt, 20)
    assert len(built) == 2
    other = model_for("llama", 6)
    generate(other, prompt, 5, greedy=True)
    assert len(built) == 3 and decode._kept[0]() is other
