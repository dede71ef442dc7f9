"""The frontier residuals in the simulator's toy stack behave as in the model: DeepNorm's
alpha, beta and post-norm, hyper-connections' widened stream, AttnRes equal to plain at init."""

import math
from dataclasses import replace

import pytest
import torch

from depthlab.config import RESIDUALS, validate_model
from depthlab.errors import UserError
from depthlab.model.residual import deepnorm_constants
from depthlab.probes import StackRequest, compare, gradient_reach, token_collapse
from depthlab.probes.simulator import _generator, _inputs, _unit_weights, wiring
from depthlab.probes.simulator_bounds import NORMS, SIM_STREAMS, page_bounds
from depthlab.variants import RESIDUAL_SPECS, keys_where


@pytest.mark.parametrize("residual", RESIDUALS)
def test_every_toy_config_is_one_the_model_accepts(residual):
    # The norm slot follows the model's rule: a residual that needs placement=post gets it.
    # (With norm=none the model has no norm slot to check: its config needs a norm there.)
    # A residual that allows no norm (nGPT) is drawn with norm=none and refuses the switch.
    norm_free = RESIDUAL_SPECS[residual].needs_no_norm
    cfg = StackRequest(depth=6, residual=residual, norm="none" if norm_free else "rmsnorm").config()
    assert validate_model(replace(cfg, final_norm=not norm_free)) == replace(cfg, final_norm=not norm_free)
    for norm in NORMS:
        if norm != "none" and norm_free:
            with pytest.raises(UserError, match=f"norm must be none with residual={residual}"):
                StackRequest(depth=6, residual=residual, norm=norm)
            continue
        cfg = StackRequest(depth=6, residual=residual, norm=norm).config()
        assert cfg.placement == ("post" if RESIDUAL_SPECS[residual].is_post else "pre")
    assert page_bounds()["post_norm"] == [r for r in RESIDUALS if RESIDUAL_SPECS[r].norm_slot == "post"]


def _deepnorm_by_hand(depth: int, gain: float, norm: str) -> torch.Tensor:
    """x <- [RMSNorm](alpha x + tanh(x beta g W1) beta g W2), written out: the stream RMS."""
    req = StackRequest(depth=depth, gain=gain, residual="deepnorm", norm=norm)
    gen = _generator(req.seed, depth, "grad")
    w = _unit_weights(gen, 2 * depth, req.width)
    n_layers = math.ceil(depth / 2)
    alpha, beta = (2 * n_layers) ** 0.25, (8 * n_layers) ** -0.25
    x = _inputs(req)
    rms = [x.pow(2).mean().sqrt()]
    for layer in range(depth):
        x = alpha * x + torch.tanh(x @ (gain * beta * w[2 * layer])) @ (gain * beta * w[2 * layer + 1])
        if norm == "rmsnorm":
            x = x / x.pow(2).mean(dim=-1, keepdim=True).add(1e-12).sqrt()
        rms.append(x.pow(2).mean().sqrt())
    return torch.stack(rms)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("depth", [1, 5, 24])
def test_deepnorm_toy_stack_is_alpha_beta_and_the_post_norm(depth, norm):
    got = gradient_reach(StackRequest(depth=depth, gain=1.5, residual="deepnorm", norm=norm))
    assert got.stream_rms == pytest.approx(_deepnorm_by_hand(depth, 1.5, norm).tolist(), rel=1e-12)
    modules = wiring(StackRequest(depth=depth, residual="deepnorm", norm=norm).config()).residuals
    alpha, beta = deepnorm_constants(math.ceil(depth / 2))
    assert {(m.alpha, m.beta) for m in modules} == {(alpha, beta)}
    if norm == "rmsnorm":  # every token leaves each write at RMS 1: the post-norm
        assert got.stream_rms[1:] == pytest.approx([1.0] * depth, rel=1e-9)
    else:  # without its norm, alpha > 1 on every write: the stream grows like alpha^N
        assert got.stream_rms[-1] / got.stream_rms[0] > 0.5 * alpha ** depth


@pytest.mark.parametrize("residual", keys_where(lambda s: s.widens_copies))
def test_hyper_connections_carry_n_copies_and_collapse_stays_finite(residual):
    req = StackRequest(depth=16, gain=1.2, residual=residual, norm="rmsnorm")
    cfg = req.config()
    assert cfg.streams == SIM_STREAMS == 4
    wired = wiring(cfg)
    opened = wired.open(_inputs(req).unsqueeze(0))
    assert opened.shape == (1, req.tokens, 4, req.width)
    assert wired.close(opened).shape == (1, req.tokens, req.width)
    for ffn in (False, True):
        c = token_collapse(StackRequest(depth=64, gain=2.0, residual=residual, ffn=ffn))
        assert all(math.isfinite(v) for v in c.rel_distance + c.mean_cosine + c.stream_rms)
    g = compare(StackRequest(depth=64, gain=2.0, residual=residual), "gradient").to_json()
    assert all(v is not None and math.isfinite(v) for v in g["improved"]["per_layer"])


@pytest.mark.parametrize("norm", NORMS)
def test_attnres_at_init_equals_plain(norm):
    # The zero query reads k * mean(history) = the plain stream (depthlab.model.depth_attention).
    for depth, gain, seed in ((1, 0.5, 0), (12, 1.5, 3), (40, 1.0, 7)):
        a = gradient_reach(StackRequest(depth=depth, gain=gain, seed=seed, residual="attnres", norm=norm))
        p = gradient_reach(StackRequest(depth=depth, gain=gain, seed=seed, residual="plain", norm=norm))
        assert a.grad_norm == pytest.approx(p.grad_norm, rel=1e-9)
        assert a.stream_rms == pytest.approx(p.stream_rms, rel=1e-9)
        c = token_collapse(StackRequest(depth=depth, gain=gain, seed=seed, residual="attnres",
                                        norm=norm, ffn=True))
        d = token_collapse(StackRequest(depth=depth, gain=gain, seed=seed, residual="plain",
                                        norm=norm, ffn=True))
        assert c.rel_distance == pytest.approx(d.rel_distance, rel=1e-9)
        assert c.mean_cosine == pytest.approx(d.mean_cosine, rel=1e-9, abs=1e-12)


def test_every_residual_has_a_page_label_in_both_languages():
    from depthlab.locales import LANGS, table

    for lang in LANGS:
        labels = table(lang)
        assert [r for r in RESIDUALS if f"sim.res.{r}" not in labels] == []
        assert "sim.t.postnorm" in labels and "sim.note.frontier" in labels
