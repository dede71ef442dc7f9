"""Known answers: path expansion, the two norms on small vectors, the residual init,
and the real model at init asked the same questions as the simulator."""

import json
import math
from dataclasses import replace

import pytest

from depthlab.errors import UserError
from depthlab.presets import get_preset
from depthlab.probes import (
    RealRequest,
    compare_norms,
    real_growth,
    real_probe,
    residual_init_std,
    residual_paths,
)


def test_two_layer_expansion_is_the_lessons_four_paths():
    p = residual_paths(2, 0.5)
    assert [v for _, v in p.paths] == [1.0, 0.5, 0.5, 0.25]
    assert [layers for layers, _ in p.paths] == [(), (1,), (2,), (1, 2)]
    assert p.residual_output == 2.25 and p.plain_output == 0.25
    assert p.jacobian == 2.25 and p.plain_jacobian == 0.25
    assert [g.n_paths for g in p.groups] == [1, 2, 1]


@pytest.mark.parametrize("depth,scale", [(1, 0.3), (5, 0.5), (10, -0.7), (32, 1.2)])
def test_expansion_equals_the_closed_form(depth, scale):
    p = residual_paths(depth, scale, x0=2.0)
    assert p.residual_output == pytest.approx(2.0 * (1 + scale) ** depth, rel=1e-12)
    assert sum(g.n_paths for g in p.groups) == 2**depth
    assert p.groups[-1].total == pytest.approx(p.plain_output)
    assert math.prod(p.jacobian_factors) == pytest.approx(p.jacobian)
    json.dumps(p.to_json())


def test_norms_on_three_four():
    n = compare_norms([3, 4])
    assert n.mean == 3.5 and n.variance == 0.25 and n.mean_square == 12.5
    assert n.rms == pytest.approx(3.5355, abs=1e-4)
    assert n.rmsnorm == pytest.approx((0.8485, 1.1314), abs=1e-4)
    assert n.layernorm == pytest.approx((-1.0, 1.0), abs=1e-4)
    assert n.centred == (-0.5, 0.5)


def test_scaled_vectors_normalise_to_the_same_vector():
    a, b = compare_norms([2, 4, 6, 8]), compare_norms([200, 400, 600, 800])
    assert a.rmsnorm == pytest.approx(b.rmsnorm, rel=1e-6)
    assert a.layernorm == pytest.approx(b.layernorm, abs=1e-4)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_bad_vectors(bad):
    with pytest.raises(UserError):
        compare_norms(bad)


def test_residual_init_std():
    assert residual_init_std(4) == pytest.approx(0.00707, abs=1e-5)
    assert residual_init_std(64) == pytest.approx(0.02 / math.sqrt(128))
    with pytest.raises(UserError):
        residual_init_std(0)


def _small(**changes):
    m = get_preset("course").model
    return replace(m, d_model=32, n_heads=2, vocab_size=256, context_len=64, **changes)


def test_real_block_probe_reports_every_sublayer():
    res = real_probe(RealRequest(_small(n_layers=3), tokens=8))
    assert res.sublayers == ("0.attn", "0.mlp", "1.attn", "1.mlp", "2.attn", "2.mlp")
    assert len(res.per_layer) == 6 and res.per_layer[-1] == 1.0
    assert len(res.stream_rms) == len(res.rel_distance) == 7
    json.dumps(res.to_json(), allow_nan=False)


def test_real_block_scaled_write_back_keeps_the_stream_flatter():
    growth = real_growth(_small(n_layers=8, init_gain=8.0), tokens=16)
    rows = {(r.scaled_init, r.residual): r.growth for r in growth.rows}
    assert rows[(False, "plain")] > rows[(True, "plain")] > 1.0
    assert rows[(False, "scaled")] < rows[(False, "plain")]
    json.dumps(growth.to_json())


@pytest.mark.parametrize("preset", ["course", "vaswani2017", "gpt2", "llama", "qwen3",
                                    "qwen_next", "olmo2", "tiny"])
def test_real_block_probe_runs_for_every_preset(preset):
    m = replace(get_preset(preset).model, n_layers=2, d_model=32, n_heads=2, vocab_size=128,
                context_len=32, n_kv_heads=None)
    res = real_probe(RealRequest(m, tokens=6))
    assert all(math.isfinite(v) and v > 0 for v in res.grad_norm)


def test_real_block_without_residual_loses_more_gradient():
    # Without the adds, each 0.02-init sublayer shrinks the stream ~10x and the gradient with it.
    plain = real_probe(RealRequest(_small(residual="none", n_layers=4), tokens=8))
    resid = real_probe(RealRequest(_small(residual="plain", n_layers=4), tokens=8))
    assert plain.ratio < 1e-3
    assert 0.5 < resid.ratio < 2.0
    assert plain.stream_rms[-1] < 1e-3 * plain.stream_rms[0]
    dead = real_probe(RealRequest(_small(residual="none", n_layers=12), tokens=8))
    json.dumps(dead.to_json(), allow_nan=False)  # 0/0 becomes null, not NaN


def test_scaling_changes_the_outputs_only_through_eps():
    """[3, 4] / 1000: LayerNorm gives +-0.0005 / sqrt(2.5e-7 + 1e-5), no longer +-1."""
    n = compare_norms([3, 4])
    small = {s.factor: s for s in n.scaled}[0.001]
    ln_small = 0.0005 / math.sqrt(2.5e-7 + 1e-5)
    assert small.layernorm_change == pytest.approx(1 / math.sqrt(0.25 + 1e-5) * 0.5 - ln_small, rel=1e-9)
    up, down = compare_norms([200, 400, 600, 800]).scaled  # x 1000: nothing in 4 decimals
    assert up.layernorm_change < 5e-5 and up.rmsnorm_change < 5e-5
    assert 1e-4 < down.layernorm_change < 2e-4  # x / 1000: variance 0.05, eps shows at 1e-4
    assert json.loads(json.dumps(n.to_json()))["scaled"][1]["factor"] == 0.001


@pytest.mark.parametrize("x", [[1e308, 1e308], [1e200], [-1e300, 5.0], [1.7e308, -1.7e308]])
def test_norms_whose_squares_overflow_are_refused(x):
    # fsum raised OverflowError (a traceback from `depthlab probe norms 1e308 1e308`), or the
    # mean square was inf and every output 0
    with pytest.raises(UserError, match="overflow float64: give numbers within about ±1e150"):
        compare_norms(x)
    assert compare_norms([1e150, -1e150]).layernorm == pytest.approx((1.0, -1.0))  # still in range


@pytest.mark.parametrize("eps", [1e-300, 1e-5, 1.0])
@pytest.mark.parametrize("v", [0.1, -0.3, 1e-200, 7.000001, -123456.789])
def test_equal_entries_centre_to_zero(v, eps):
    """Three 0.1s sum to 0.30000000000000004 in floats, whose third is not 0.1: a rounded
    mean left -1.4e-17 in every centred entry, and LayerNorm -1 at a tiny eps. Exact
    statistics: the mean is the entry, the centred values and LayerNorm are 0."""
    n = compare_norms([v, v, v], eps)
    assert n.mean == v and n.variance == 0.0
    assert n.centred == (0.0, 0.0, 0.0) and n.layernorm == (0.0, 0.0, 0.0)


def test_neighbouring_doubles_are_one_step_apart():
    """[1, 1 + 2^-52]: the exact mean 1 + 2^-53 lies between two doubles; the centred
    values are -2^-53 and +2^-53, so LayerNorm with a negligible eps is [-1, 1]."""
    n = compare_norms([1.0, 1.0 + 2.0**-52], 1e-300)
    assert n.centred == (-(2.0**-53), 2.0**-53) and n.layernorm == (-1.0, 1.0)
    assert n.variance == 2.0**-106


@pytest.mark.parametrize("v", [1e-160, 1e-170, 5e-324])
def test_the_rms_of_tiny_entries_keeps_their_digits(v):
    """Their squares fall below float64 (1e-340) or into its subnormals; the RMS of equal
    entries is the entry."""
    assert compare_norms([v, v], 1e-5).rms == v


def test_squares_near_float64s_largest_are_exact_or_refused_in_one_line():
    """The squares of 1.1e151 are finite, but their float sum after x * 1000 overflowed
    and fsum raised; the statistics are exact now, and only a mean square past float64's
    largest is refused, in one line."""
    n = compare_norms([1.1e151, 1.1e151])
    assert n.rms == 1.1e151 and n.rmsnorm == (1.0, 1.0)
    assert [s.factor for s in n.scaled if s.rmsnorm_change is None] == []
    edge = compare_norms([1e154, 1e154])  # x * 1000: squares of 1e157 leave float64
    assert [(s.factor, s.rmsnorm_change) for s in edge.scaled] == [(1000.0, None), (0.001, 0.0)]
    with pytest.raises(UserError, match="overflow float64"):
        compare_norms([1e155, 1e155])


@pytest.mark.parametrize("eps", [math.inf, math.nan, 0.0, -1e-5, 1.5, 1e999])
def test_eps_outside_the_pages_range_is_refused(eps):
    with pytest.raises(UserError, match=r"eps must be in \(0, 1\]"):
        compare_norms([3.0, 4.0], eps)
