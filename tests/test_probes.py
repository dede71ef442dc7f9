"""Physics of the simulator probes (LESSON 2a-2c): effects with loose, ratio-based
thresholds and the same effect for every seed.

Thresholds come from the spread measured over seeds 10..209 by
`python scripts/probe_spread.py` (min..max quoted beside each), with room to spare; the
tests run on seeds 0..9 and on 1000..1009, which that measurement never saw."""

import json
import math

import pytest
from conditioning import sensitivity, tolerance

from depthlab.errors import UserError
from depthlab.probes import (
    GrowthRequest,
    StackRequest,
    gain_sweep,
    gradient_reach,
    stream_growth,
    token_collapse,
)

SEEDS = [*range(10), *range(1000, 1010)]
IMPROVED = dict(residual="scaled", norm="rmsnorm")  # x + F(RMSNorm(x)) / sqrt(N)


@pytest.mark.parametrize("seed", SEEDS)
def test_plain_stack_vanishes_or_explodes_with_a_narrow_knife_edge(seed):
    sweep = gain_sweep(StackRequest(seed=seed))
    ratios = dict(zip(sweep.gains, sweep.naive_ratios, strict=True))
    assert ratios[0.5] <= 1e-15  # measured 1.5e-21..1.2e-18
    assert ratios[2.0] >= 5  # measured 17..5.8e5: it explodes, by how much depends on the seed
    assert math.log10(ratios[2.0] / ratios[0.5]) > 15  # measured 20.5 decades at least
    band = [g for g, r in ratios.items() if 0.1 <= r <= 10]
    assert band, "some g near 1 must neither vanish nor explode"
    assert len(band) <= 0.45 * len(ratios)  # measured at most 12 of the 31 gains
    assert all(0.8 <= g <= 2.0 for g in band)  # measured 0.95..1.85


@pytest.mark.parametrize("seed", SEEDS)
def test_residual_only_never_vanishes_but_amplifies(seed):
    sweep = gain_sweep(StackRequest(seed=seed, residual="plain"))
    assert min(sweep.ratios) >= 1.0  # measured 1.29..2.85
    at_one = gradient_reach(StackRequest(seed=seed, residual="plain"))
    assert at_one.ratio > 3  # the lesson: about x20 at N = 32; measured 7.0..61
    assert at_one.stream_rms[-1] > 3  # the lesson: 1 -> 6.3; measured 3.7..6.9
    assert at_one.stream_rms[-1] > 2.5 * at_one.stream_rms[0]  # measured 3.3x at least


@pytest.mark.parametrize("seed", SEEDS)
def test_all_three_toggles_keep_the_gradient_and_the_stream_near_one(seed):
    # Near one against the plain stack's 1e-21..6e5 over the same gains: measured
    # 0.94..8.8 (the top of the range at the largest gains of a few seeds).
    sweep = gain_sweep(StackRequest(seed=seed, **IMPROVED))
    assert all(0.5 <= r <= 20 for r in sweep.ratios)
    for g in (0.5, 1.0, 2.0):
        rms = gradient_reach(StackRequest(seed=seed, gain=g, **IMPROVED)).stream_rms
        assert 0.5 <= rms[-1] <= 4  # measured 0.82..2.52


def test_sweep_matches_single_probes(monkeypatch):
    # The batched pass may use other matmul kernels than a single stack: equal within each
    # ratio's own conditioning (the naive g = 2 ratio amplifies rounding ~2e6-fold).
    sweep = gain_sweep(StackRequest(residual="plain"))
    for i in (0, 10, 30):
        single = lambda i=i: [gradient_reach(StackRequest(gain=sweep.gains[i], residual=r)).ratio
                              for r in ("plain", "none")]
        kappas = sensitivity(monkeypatch, single)
        for got, want, kappa in zip(single(), (sweep.ratios[i], sweep.naive_ratios[i]), kappas,
                                    strict=True):
            assert got == pytest.approx(want, rel=tolerance(kappa), abs=0)


def test_gradient_result_shape_and_determinism():
    req = StackRequest(depth=12, gain=1.3, residual="plain", seed=4)
    a = gradient_reach(req)
    gradient_reach.cache_clear()
    b = gradient_reach(req)
    assert a.row() == b.row()
    assert len(a.per_layer) == 12 and a.per_layer[-1] == 1.0 and a.ratio == a.per_layer[0]
    assert len(a.stream_rms) == 13
    json.dumps(a.row(), allow_nan=False)
    other = gradient_reach(StackRequest(depth=13, gain=1.3, residual="plain", seed=4))
    assert other.per_layer[:12] != a.per_layer  # a new N draws new weights
    assert gradient_reach(StackRequest(depth=12, gain=1.31, residual="plain", seed=4)).ratio != a.ratio


@pytest.mark.parametrize("seed", SEEDS)
def test_attention_only_plain_stack_collapses(seed):
    r8 = token_collapse(StackRequest(depth=8, seed=seed)).rel_distance
    r32 = token_collapse(StackRequest(depth=32, seed=seed)).rel_distance
    assert r8[0] > 0.7  # random tokens start far from identical; measured 0.82..0.97
    assert r8[-1] <= 0.1  # at least 8x closer after 8 layers; measured 9.4e-4..4.4e-2
    assert r32[-1] <= 1e-7  # measured 5.4e-12..7.9e-9


@pytest.mark.parametrize("seed", SEEDS)
def test_residual_slows_collapse_and_all_toggles_keep_tokens_distinct(seed):
    plain = token_collapse(StackRequest(seed=seed))
    residual = token_collapse(StackRequest(seed=seed, residual="plain"))
    improved = token_collapse(StackRequest(seed=seed, **IMPROVED))
    assert residual.rel_distance[-1] > 1e4 * plain.rel_distance[-1]  # measured 3.2e5x at least
    # Residual alone still converges (r(32) median 0.01, max 0.54; cosine 0.75..1.0), and
    # always more than with all three toggles (r ratio 1.5x and cosine gap 0.36 at least).
    assert residual.rel_distance[-1] < 0.75 and residual.mean_cosine[-1] > 0.6
    assert improved.rel_distance[-1] > 1.2 * residual.rel_distance[-1]
    assert residual.mean_cosine[-1] - improved.mean_cosine[-1] > 0.2
    assert improved.rel_distance[-1] >= 0.4  # measured 0.55..0.95
    assert improved.mean_cosine[-1] <= 0.75  # measured -0.10..0.64


def test_ffns_between_attention_layers_slow_the_collapse():
    # Dong et al. 2021: an MLP with a Lipschitz constant above 1 counteracts the averaging.
    # At g = 2 the tanh FFN has gain ~g^2 = 4; at g = 1 the effect is not consistent.
    without = sorted(token_collapse(StackRequest(gain=2.0, seed=s)).rel_distance[-1] for s in SEEDS)
    with_ffn = sorted(token_collapse(StackRequest(gain=2.0, seed=s, ffn=True)).rel_distance[-1]
                      for s in SEEDS)
    assert with_ffn[len(SEEDS) // 2] > 100 * without[len(SEEDS) // 2]  # the medians
    slower = sum(
        token_collapse(StackRequest(gain=2.0, seed=s, ffn=True, **IMPROVED)).rel_distance[-1]
        > token_collapse(StackRequest(gain=2.0, seed=s, **IMPROVED)).rel_distance[-1]
        for s in SEEDS)
    assert slower >= 0.7 * len(SEEDS)


def test_collapse_metrics_on_known_inputs():
    import torch

    from depthlab.probes import mean_cosine, rel_distance

    same = torch.ones(4, 3, dtype=torch.float64) * torch.tensor([1.0, 2.0, 3.0])
    assert rel_distance(same).item() == pytest.approx(0.0, abs=1e-15)
    assert mean_cosine(same).item() == pytest.approx(1.0)
    eye = torch.eye(3, dtype=torch.float64)
    assert mean_cosine(eye).item() == pytest.approx(0.0)
    assert rel_distance(eye).item() == pytest.approx(math.sqrt(2 / 3))


def test_stream_growth_follows_sqrt_one_plus_w():
    res = stream_growth(GrowthRequest(writes=128))
    assert res.expected[-1] == pytest.approx(math.sqrt(129))
    assert res.measured_rms[-1] == pytest.approx(11.36, rel=0.05)
    assert res.measured_rms[0] == pytest.approx(1.0, rel=0.05)
    for seed in SEEDS:
        assert stream_growth(GrowthRequest(writes=128, seed=seed)).measured_rms[-1] == pytest.approx(
            11.36, rel=0.05)


@pytest.mark.parametrize("bad", [dict(depth=0), dict(depth=257), dict(gain=0.0), dict(gain=-1.0),
                                 dict(gain=float("nan")), dict(seed=-1), dict(tokens=1)])
def test_bad_requests_are_user_errors(bad):
    with pytest.raises(UserError):
        StackRequest(**bad)


def test_requests_are_hashable_cache_keys():
    assert hash(StackRequest()) == hash(StackRequest())
    assert StackRequest(residual="plain", norm="rmsnorm").naive() == StackRequest()
