"""The Gated DeltaNet sublayer (depthlab.model.deltanet): the chunked (WY / UT) form equals
the token-by-token recurrence, in values and gradients, over the shapes that matter."""

from __future__ import annotations

import pytest
import torch

from depthlab.config import ModelConfig
from depthlab.model.deltanet import (
    CHUNK,
    DeltaState,
    GatedDeltaNet,
    chunked_gated_delta_rule,
    recurrent_gated_delta_rule,
)

# (T, key heads, value heads, conv kernel): T below, at, past and not a multiple of the
# chunk, and one token; value heads a multiple of the key heads (the anchor: 16 and 48).
SHAPES = [(1, 2, 2, 4), (37, 2, 4, 2), (CHUNK, 1, 3, 3), (CHUNK + 1, 2, 2, 4),
          (2 * CHUNK + 11, 2, 6, 4)]


def layer(k_heads: int, v_heads: int, kernel: int, seed: int = 0) -> GatedDeltaNet:
    cfg = ModelConfig(vocab_size=32, d_model=32, n_heads=4, mixer="gated_deltanet",
                      linear_key_heads=k_heads, linear_value_heads=v_heads, linear_key_dim=8,
                      linear_value_dim=6, linear_conv_kernel=kernel)
    torch.manual_seed(seed)
    net = GatedDeltaNet(cfg)
    for p in net.parameters():  # weights of order one, so the state is well exercised
        if p.ndim == 2:
            torch.nn.init.normal_(p, 0.0, 0.3)
    # slow decays (A near 0.01..1), so the state carries across chunks
    net.A_log.data = torch.linspace(-4.0, 0.0, v_heads)
    return net


def close(a: torch.Tensor, b: torch.Tensor, rel: float = 2e-5) -> bool:
    """Equal up to float32 rounding, relative to the size of the values."""
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max()) <= rel * max(1.0, float(b.abs().max()))


def test_one_token_from_an_empty_state_is_its_write_read_back():
    """S = beta k v^T from S = 0, so o = beta (q . k) v: the rule by hand."""
    torch.manual_seed(1)
    q, k = torch.randn(1, 1, 1, 4), torch.randn(1, 1, 1, 4)
    v, g, beta = torch.randn(1, 1, 1, 3), torch.tensor([[[-0.5]]]), torch.tensor([[[0.25]]])
    expected = 0.25 * (q * k).sum() * v
    for rule in (recurrent_gated_delta_rule, chunked_gated_delta_rule):
        out, S = rule(q, k, v, g, beta)
        assert torch.allclose(out, expected, atol=1e-6)
        assert torch.allclose(S[0, 0], 0.25 * k[0, 0, 0, :, None] * v[0, 0, 0, None, :], atol=1e-6)


def test_the_rule_forgets_then_corrects():
    """Two writes at the same unit key with beta = 1: the second replaces the first
    (the delta rule writes the error v2 - exp(g) v1, not v2 on top)."""
    k = torch.tensor([1.0, 0.0]).expand(1, 1, 2, 2)
    v = torch.tensor([[[[3.0], [5.0]]]])
    g, beta = torch.tensor([[[0.0, -1.0]]]), torch.ones(1, 1, 2)
    for rule in (recurrent_gated_delta_rule, chunked_gated_delta_rule):
        out, S = rule(k, k, v, g, beta)
        assert torch.allclose(out[0, 0, :, 0], torch.tensor([3.0, 5.0]))
        assert torch.allclose(S[0, 0, :, 0], torch.tensor([5.0, 0.0]))


@pytest.mark.parametrize("T,k_heads,v_heads,kernel", SHAPES)
def test_chunked_equals_recurrent_values_and_gradients(T, k_heads, v_heads, kernel):
    net = layer(k_heads, v_heads, kernel)
    torch.manual_seed(2)
    x = torch.randn(2, T, 32)
    weights = torch.randn(2, T, 32)  # a fixed random read of the output, for gradients

    def run(recurrent: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        net.recurrent = recurrent
        net.zero_grad()
        xi = x.clone().requires_grad_()
        out = net.mix(xi)
        (out * weights).sum().backward()
        return out.detach(), [xi.grad, *(p.grad for p in net.parameters())]

    out_c, grads_c = run(False)
    out_r, grads_r = run(True)
    assert close(out_c, out_r)
    for gc, gr in zip(grads_c, grads_r, strict=True):
        assert close(gc, gr, rel=1e-4)


@pytest.mark.parametrize("kernel", [1, 2, 3, 4])
def test_the_state_carries_the_sequence_across_calls(kernel):
    """Prefill of 70 tokens, then one token at a time: the conv inputs and the delta-rule
    state in DeltaState make each call continue the sequence (what decode runs)."""
    net = layer(2, 4, kernel)
    torch.manual_seed(3)
    x = torch.randn(1, 75, 32)
    whole = net.mix(x)
    state = DeltaState()
    parts = [net.mix(x[:, :70], state)] + [net.mix(x[:, t:t + 1], state) for t in range(70, 75)]
    assert close(torch.cat(parts, dim=1), whole)
    assert state.S.shape == (1, 4, 8, 6) and state.conv.shape == (1, 2 * 16 + 24, kernel - 1)
