"""Known answers for the norms, worked by hand: the lesson's exact small arithmetic (its section 3)."""

import math

import pytest
import torch

from depthlab.model.norms import LayerNorm, RMSNorm, ZeroCenteredRMSNorm, make_norm


def test_rmsnorm_of_3_4():
    y = RMSNorm(2, eps=0.0)(torch.tensor([3.0, 4.0]))
    # RMS(3, 4) = sqrt(12.5) = 3.5355: y = (0.849, 1.131), and y's own RMS is 1
    assert y.pow(2).mean().sqrt().item() == pytest.approx(1.0, abs=1e-6)
    assert y.tolist() == pytest.approx([3 / math.sqrt(12.5), 4 / math.sqrt(12.5)], abs=1e-6)
    assert y.tolist() == pytest.approx([0.849, 1.131], abs=1e-3)


def test_layernorm_of_3_4_is_minus_one_one():
    y = LayerNorm(2, eps=1e-5)(torch.tensor([3.0, 4.0]))
    assert y.tolist() == pytest.approx([-1.0, 1.0], abs=1e-4)


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm, ZeroCenteredRMSNorm])
def test_scale_invariance(cls):
    norm = cls(4, 1e-6)
    small = norm(torch.tensor([2.0, 4.0, 6.0, 8.0]))
    large = norm(torch.tensor([200.0, 400.0, 600.0, 800.0]))
    assert torch.allclose(small, large, atol=1e-5)


def test_zero_centered_equals_rmsnorm_with_unit_gamma_at_init():
    x = torch.randn(3, 5, 16)
    zc = ZeroCenteredRMSNorm(16, eps=1e-6)
    assert torch.all(zc.weight == 0)
    assert torch.allclose(zc(x), RMSNorm(16, eps=1e-6)(x), atol=1e-6)


def test_rmsnorm_keeps_float64():
    x = torch.randn(4, 8, dtype=torch.float64)
    assert RMSNorm(8).double()(x).dtype == torch.float64


def test_none_makes_no_module():
    assert make_norm("none", 8, 1e-5) is None
