"""Known answers for the residual registry (depthlab.model.residual)."""

import math
from dataclasses import replace

import pytest
import torch

from depthlab.config import RESIDUALS, ModelConfig
from depthlab.model import Transformer
from depthlab.model.residual import RESIDUAL_BUILDERS, make_residual

TINY = ModelConfig(vocab_size=40, context_len=16, n_layers=3, d_model=16, n_heads=2)


def test_every_config_value_has_a_registry_entry():
    assert set(RESIDUALS) == set(RESIDUAL_BUILDERS)


@pytest.mark.parametrize("kind, expected", [
    ("none", [5.0, 7.0]),                    # F(x) alone
    ("plain", [6.0, 9.0]),                   # x + F(x)
    ("scaled", [1 + 5 / math.sqrt(6), 2 + 7 / math.sqrt(6)]),  # 3 layers: 6 writes
    ("rezero", [1.0, 2.0]),                  # a = 0 at init: the write vanishes
])
def test_one_write_on_a_fixed_vector(kind, expected):
    res = make_residual(replace(TINY, residual=kind))
    x, f = torch.tensor([1.0, 2.0]), torch.tensor([5.0, 7.0])
    assert res(res.read(x), res.scale(f)).tolist() == pytest.approx(expected, abs=1e-6)


def test_rezero_stack_is_the_identity_at_init_bitwise():
    torch.manual_seed(0)
    model = Transformer(replace(TINY, residual="rezero", final_norm=False))
    x = torch.randn(2, 5, 16)
    _, cache = model.run_with_cache(embeds=x, names=["blocks.2.hook_resid_post"])
    assert torch.equal(cache["blocks.2.hook_resid_post"], x)
    alphas = [p for n, p in model.named_parameters() if n.endswith("residual.alpha")]
    assert len(alphas) == 2 * TINY.n_layers and all(a.item() == 0.0 for a in alphas)


def test_rezero_scalars_learn_and_the_stack_leaves_the_identity():
    torch.manual_seed(0)
    model = Transformer(replace(TINY, residual="rezero"))
    idx = torch.randint(0, 40, (2, 8))
    loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
    loss.backward()
    grads = [model.blocks[i].mlp_residual.alpha.grad for i in range(3)]
    assert all(g is not None and g.abs().item() > 0 for g in grads)


def test_scaled_and_plain_differ_only_by_the_write_scale():
    torch.manual_seed(0)
    scaled = Transformer(replace(TINY, residual="scaled"))
    plain = Transformer(replace(TINY, residual="plain"))
    plain.load_state_dict(scaled.state_dict())
    x = torch.randn(1, 4, 16)
    names = ["blocks.0.hook_attn_out", "blocks.0.hook_attn_write"]
    _, cache = scaled.run_with_cache(embeds=x, names=names)
    assert torch.allclose(cache[names[1]], cache[names[0]] / math.sqrt(6), atol=1e-7)
    assert replace(TINY, residual="scaled").write_scale == pytest.approx(1 / math.sqrt(6))
    assert replace(TINY, residual="plain").write_scale == 1.0
