"""Hook points: stable names, always removed, gradients equal autograd's."""

from dataclasses import replace

import pytest
import torch

from depthlab.config import ModelConfig
from depthlab.errors import UserError
from depthlab.model import Transformer

CFG = ModelConfig(vocab_size=40, context_len=16, n_layers=3, d_model=16, n_heads=2)


def test_names_are_stable_and_transformerlens_style():
    names = Transformer(CFG).hook_names()
    assert names == Transformer(CFG).hook_names()
    for i in range(3):
        for site in ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out",
                     "hook_mlp_out", "hook_attn_in", "hook_mlp_in", "hook_attn_write",
                     "hook_mlp_write", "attn.hook_pattern", "attn.hook_q", "attn.hook_k",
                     "attn.hook_v", "attn.hook_z"):
            assert f"blocks.{i}.{site}" in names
    assert names[0] == "hook_embed" and names[-1] == "hook_final"


def test_cache_records_pattern_with_rows_summing_to_one():
    model = Transformer(CFG)
    _, cache = model.run_with_cache(torch.randint(0, 40, (2, 7)),
                                    names=lambda n: n.endswith("hook_pattern"))
    assert len(cache.keys()) == 3
    pattern = cache["blocks.1.attn.hook_pattern"]
    assert pattern.shape == (2, 2, 7, 7)
    assert torch.allclose(pattern.sum(-1), torch.ones(2, 2, 7))
    assert torch.all(pattern.triu(1) == 0)


def test_hooks_removed_even_when_forward_raises():
    model = Transformer(CFG)

    def boom(t, name):
        raise RuntimeError("inside a hook")

    with pytest.raises(RuntimeError, match="inside a hook"):
        with model.hooks(fwd=[("blocks.1.hook_resid_mid", boom)]):
            model(torch.randint(0, 40, (1, 4)))
    assert not any(hp._forward_hooks for hp in model.hook_points().values())
    model(torch.randint(0, 40, (1, 4)))  # runs clean afterwards


def test_unknown_hook_name_is_a_clear_error():
    model = Transformer(CFG)
    with pytest.raises(UserError, match="unknown hook point 'blocks.9.hook_resid_pre'"):
        model.run_with_cache(torch.zeros(1, 2, dtype=torch.long), names=["blocks.9.hook_resid_pre"])


def test_cached_gradients_equal_autograd():
    torch.manual_seed(0)
    model = Transformer(replace(CFG, residual="none"))
    idx = torch.randint(0, 40, (2, 6))
    names = ["blocks.0.hook_resid_post", "blocks.2.hook_mlp_in", "blocks.1.attn.hook_pattern"]
    loss_of = lambda logits: logits.logsumexp(-1).sum()
    _, cache = model.run_with_cache(idx, names=names, grad_of=loss_of)

    kept = {}

    def keep(t, name):
        kept[name] = t

    with model.hooks(fwd=[(n, keep) for n in names]):
        loss = loss_of(model(idx))
    expected = torch.autograd.grad(loss, [kept[n] for n in names])
    for name, grad in zip(names, expected, strict=True):
        assert torch.allclose(cache.grads[name], grad, atol=1e-6), name
    assert not any(hp._forward_hooks for hp in model.hook_points().values())


def test_forward_hook_can_replace_an_activation():
    model = Transformer(CFG)
    idx = torch.randint(0, 40, (1, 5))
    base = model(idx)
    with model.hooks(fwd=[("hook_final", lambda t, n: t * 0)]):
        assert torch.all(model(idx) == 0)
    assert torch.equal(model(idx), base)


def test_hook_points_skip_the_module_call_only_while_no_hook_could_see_it():
    from torch.nn.modules.module import register_module_forward_hook

    model = Transformer(CFG)
    idx = torch.randint(0, 40, (1, 5))
    seen = []
    handle = register_module_forward_hook(
        lambda module, _inputs, _output: seen.append(type(module).__name__))
    try:
        model(idx)
    finally:
        handle.remove()
    # A global hook sees every hook point but the pattern, which SDPA's path never forms.
    expected = [n for n in model.hook_names() if not n.endswith("hook_pattern")]
    assert seen.count("HookPoint") == len(expected)
    point = model.hook_points()["blocks.1.hook_resid_mid"]
    pre = point.register_forward_pre_hook(lambda _module, args: (args[0] * 0,))
    try:
        zeroed = model.run_with_cache(idx, names=["blocks.1.hook_resid_mid"])[1]
    finally:
        pre.remove()
    assert torch.all(zeroed["blocks.1.hook_resid_mid"] == 0)
    seen.clear()
    model(idx)
    assert seen == []  # removed: no module hook left anywhere


def _bench_module(name: str):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("changes", [{}, {"norm": "layernorm", "ffn": "gelu", "position": "learned",
                                          "bias": True}])  # course, gpt2's block
def test_hooks_compiled_out_compute_the_same_step(changes):
    """bench/nanogpt_step.py's baseline for what the hook points cost: the forwards with
    every hook call removed from their source compute the same loss and gradients bit for
    bit, and no hook can see them any more (the calls are gone)."""
    compile_out = _bench_module("hooks_out").compile_out
    cfg = replace(CFG, **changes)
    torch.manual_seed(0)
    ids = torch.randint(0, 40, (3, 16))
    grads = []
    for strip in (False, True):
        torch.manual_seed(1)
        model = Transformer(cfg).train()
        if strip:
            model = compile_out(model)
        loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        grads.append([loss.detach()] + [p.grad for p in model.parameters()])
        seen: list[str] = []
        with model.hooks(fwd=[("blocks.0.hook_resid_post", lambda t, n, seen=seen: seen.append(n))]):
            model(ids)
        assert bool(seen) is not strip
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))
