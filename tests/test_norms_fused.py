"""The fused norm kernels (F.layer_norm, F.rms_norm) compute the readable reference
formulas: forward and gradients agree within 1e-6 for every norm, with trained-looking
scales, in float32 and float64; half precision takes the reference path."""

import pytest
import torch

from depthlab.model.norms import NORM_CLASSES

KINDS = sorted(NORM_CLASSES)


def randomized(kind: str, dim: int, dtype: torch.dtype, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    norm = NORM_CLASSES[kind](dim).to(dtype)
    with torch.no_grad():
        for p in norm.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return norm


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 30.0])
def test_fused_forward_and_gradients_match_the_reference(kind, dtype, scale):
    norm = randomized(kind, 96, dtype, seed=int(scale * 10) + len(kind))
    x = (scale * torch.randn(4, 7, 96, dtype=dtype)).requires_grad_()
    fused, ref = norm(x), norm.reference(x)
    assert torch.allclose(fused, ref, atol=1e-6, rtol=1e-6)
    upstream = torch.randn_like(fused)
    g_fused = torch.autograd.grad(fused, [x, *norm.parameters()], upstream)
    g_ref = torch.autograd.grad(ref, [x, *norm.parameters()], upstream)
    for a, b in zip(g_fused, g_ref, strict=True):
        tol = 1e-6 * max(1.0, b.abs().max().item())  # parameter grads sum over 28 rows
        assert torch.allclose(a, b, atol=tol, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_half_precision_input_takes_the_reference_path(kind):
    norm = randomized(kind, 32, torch.float32, seed=1)
    x = torch.randn(3, 32).to(torch.bfloat16)
    assert torch.equal(norm(x), norm.reference(x))


def test_zero_centred_rmsnorm_is_the_identity_scale_at_init():
    norm = NORM_CLASSES["rmsnorm_zero_centered"](16)
    x = torch.randn(5, 16)
    expected = x / x.pow(2).mean(-1, keepdim=True).add(norm.eps).sqrt()
    assert torch.allclose(norm(x), expected, atol=1e-6)
