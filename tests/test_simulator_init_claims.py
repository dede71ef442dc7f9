"""What the page says of HC and AttnRes at init (locale keys sim.init.hc, sim.init.attnres,
shown beside the simulator and the "Try them" links) holds in the simulator's numbers:
AttnRes gives plain's numbers in both modes; HC gives plain's distance and cosines exactly,
4 x plain's stream RMS (SIM_STREAMS copies), and gradients of its own."""

from __future__ import annotations

import numpy as np
import pytest

from depthlab.locales import table
from depthlab.probes.simulator_bounds import SIM_STREAMS
from depthlab.web import compute
from depthlab.web.schemas import SimulateRequest


def rows(residual: str, mode: str, n: int, g: float, norm: str) -> dict:
    return compute.simulate(SimulateRequest(mode=mode, n=n, g=g, residual=residual, norm=norm))["improved"]


def test_the_claims_are_on_the_page_in_both_languages():
    for lang in ("en", "zh"):
        assert {"sim.init.hc", "sim.init.attnres"} <= set(table(lang))
    assert "4 ×" in table("en")["sim.init.hc"] and SIM_STREAMS == 4


@pytest.mark.parametrize("mode", ["gradient", "collapse"])
@pytest.mark.parametrize("norm", ["none", "rmsnorm"])
@pytest.mark.parametrize("n, g", [(4, 0.5), (32, 1.0)])
def test_attnres_at_init_is_plain(mode, norm, n, g):
    plain, attnres = rows("plain", mode, n, g, norm), rows("attnres", mode, n, g, norm)
    for key, ys in plain.items():
        if isinstance(ys, list) and ys and isinstance(ys[0], float):
            # float64 rounding: relative for the scales, absolute for the distance from
            # all-equal, which falls to 1e-10 and below where the two stacks round apart
            tol = {"rel_distance": dict(rtol=0, atol=1e-9)}.get(key, dict(rtol=1e-8, atol=0))
            np.testing.assert_allclose(attnres[key], ys, err_msg=key, **tol)


@pytest.mark.parametrize("norm", ["none", "rmsnorm"])
@pytest.mark.parametrize("n, g", [(4, 0.5), (32, 1.0)])
def test_hc_at_init_collapses_as_plain_with_four_copies(norm, n, g):
    plain, hc = rows("plain", "collapse", n, g, norm), rows("hc", "collapse", n, g, norm)
    assert hc["rel_distance"] == plain["rel_distance"] and hc["mean_cosine"] == plain["mean_cosine"]
    np.testing.assert_allclose(hc["stream_rms"], np.array(plain["stream_rms"]) * SIM_STREAMS, rtol=1e-12)


def test_hc_gradients_differ_from_plain_at_init():
    plain, hc = rows("plain", "gradient", 32, 1.0, "rmsnorm"), rows("hc", "gradient", 32, 1.0, "rmsnorm")
    assert not np.allclose(hc["per_layer"], plain["per_layer"], rtol=0.1)
