"""The simulator is wired with the model's own residual and norm modules (one write rule).

PINS were computed by the previous implementation (its own `_write` and `rms_normalize`,
toggles residual / prenorm / scale_writes), on main at 7504376, before the simulator
switched to the model's modules; the same settings must give the same numbers, within what
rounding on another CPU can move each one: a tolerance measured from each number's own
conditioning (tests/conditioning.py).
"""

import math

import pytest
import torch
from conditioning import sensitivity, tolerance

from depthlab.config import RESIDUALS
from depthlab.errors import UserError
from depthlab.model import residual as registry
from depthlab.probes import StackRequest, compare, gain_sweep, gradient_reach, token_collapse
from depthlab.probes.simulator import ToyConfig
from depthlab.probes.simulator_bounds import NORMS, page_bounds
from depthlab.variants import RESIDUAL_SPECS, ResidualSpec

# old toggles (residual, prenorm, scale_writes) -> the model's switches (residual, norm)
OLD_TO_NEW = {(False, False, False): ("none", "none"), (True, False, False): ("plain", "none"),
              (False, True, False): ("none", "rmsnorm"), (True, True, False): ("plain", "rmsnorm"),
              (True, False, True): ("scaled", "none"), (True, True, True): ("scaled", "rmsnorm")}

# Computed by the previous implementation (see the module docstring), in the order of
# `pinned_values` below.
PINS = {
    (False, False, False): (2.66644956072331, 1.0447394443891072, 0.938517368385551, 205718144.4503383, 1.712601716427492, 0.00011535910434487449, 0.9999999856286437, 0.006923795148817236, 0.0032156932214045825, 0.5381261601433849, 3.3011016615435184e-15, 1506.5174810327235, 0.05297771583729805),  # noqa: E501
    (True, False, False): (21.631516723327525, 4.862901274162852, 3.3537904842539024, 75759.42397466321, 15.6376873234349, 0.27896899309732576, 0.9085827732058912, 21.45121052175831, 0.47277818277570344, 16.22511773513307, 1.3553597385867981, 145.1688767265533, 0.05297771583729805),  # noqa: E501
    (False, True, False): (3.7759665380030154, 0.9577767605149708, 2.4193071814026346, 11752.332939418673, 1.8625628219816497, 6.387062648684322e-05, 0.9999999951778112, 0.7945053026768133, 0.0017664685366164889, 0.5460793689781537, 0.07242977982169764, 812.4771681102118, 0.05297771583729805),  # noqa: E501
    (True, True, False): (9.467896499651555, 3.933902881820836, 1.5502224849858364, 55.71704710444908, 12.858887199034344, 0.4936136440707216, 0.7188566416649138, 2.370773457339481, 0.750493985905052, 3.1790456401708296, 1.391851216591692, 11.681182500047068, 0.05297771583729805),  # noqa: E501
    (True, False, True): (1.868909302047904, 1.565754907561816, 1.3708681746615412, 3.87864631676773, 1.7448563570317126, 0.8963716566868731, 0.03316942147452258, 1.1394279660481037, 0.8318756260221886, 1.411102385882539, 1.0134673066654363, 4.969643090885694, 0.05297771583729805),  # noqa: E501
    (True, True, True): (1.7854758487483058, 1.5373395797947076, 1.2608687515809553, 2.7350371493946293, 1.6701788233466546, 0.9152913696486766, -0.003251792872760954, 1.1022921271070718, 0.8610426698373609, 1.3175421276107557, 1.0195818451555256, 3.1137968058692103, 0.05297771583729805),  # noqa: E501
}


def pinned_values(residual: str, norm: str) -> tuple[float, ...]:
    sw = dict(residual=residual, norm=norm)
    g = gradient_reach(StackRequest(depth=12, gain=1.5, seed=3, **sw))
    g64 = gradient_reach(StackRequest(depth=64, gain=2.0, **sw))
    c = token_collapse(StackRequest(depth=16, gain=0.8, seed=1, **sw))
    cf = token_collapse(StackRequest(depth=7, gain=1.2, ffn=True, **sw))
    s = gain_sweep(StackRequest(depth=24, **sw))
    return (g.ratio, g.stream_rms[-1], g.per_layer[5], g64.ratio, g64.stream_rms[-1],
            c.rel_distance[-1], c.mean_cosine[-1], c.stream_rms[-1], cf.rel_distance[-1],
            cf.stream_rms[-1], s.ratios[0], s.ratios[-1], s.naive_ratios[10])


@pytest.mark.parametrize("old", list(PINS), ids=lambda t: "+".join(OLD_TO_NEW[t]))
def test_every_number_equals_the_previous_implementation(old, monkeypatch):
    new = pinned_values(*OLD_TO_NEW[old])
    kappas = sensitivity(monkeypatch, lambda: pinned_values(*OLD_TO_NEW[old]))
    for before, now, kappa in zip(PINS[old], new, kappas, strict=True):
        assert now == pytest.approx(before, rel=tolerance(kappa), abs=0)


def test_the_tolerance_is_tight_where_the_stack_is_well_conditioned(monkeypatch):
    # The measured tolerance is not a blanket: every number of the scaled stack keeps within
    # 1e-12 (its worst, the mean cosine, has kappa ~100); the naive chaotic ratio gets ~1e-4.
    scaled = sensitivity(monkeypatch, lambda: pinned_values("scaled", "rmsnorm"))
    assert max(tolerance(k) for k in scaled) < 1e-12
    naive = sensitivity(monkeypatch, lambda: pinned_values("none", "none"))
    assert 1e-8 < tolerance(naive[3]) < 1e-3  # the depth-64, g = 2 ratio


def test_write_scale_is_the_models_rule_over_the_toy_stacks_writes():
    for depth, ffn in ((1, False), (7, False), (32, False), (7, True), (64, True)):
        req = StackRequest(depth=depth, residual="scaled", ffn=ffn)
        writes = depth * (2 if ffn else 1)
        assert req.config().n_writes == writes
        assert req.to_json()["write_scale"] == 1 / math.sqrt(writes)
        assert StackRequest(depth=depth, residual="plain", ffn=ffn).config().write_scale == 1.0


def test_switch_values_come_from_the_registry():
    assert tuple(registry.RESIDUAL_BUILDERS) == RESIDUALS
    bounds = page_bounds()
    assert bounds["residuals"] == list(RESIDUALS) and bounds["norms"] == list(NORMS)
    with pytest.raises(UserError, match=r"residual must be one of none, plain, scaled, rezero"):
        StackRequest(residual="sideways")
    with pytest.raises(UserError, match=r"norm must be one of none, rmsnorm, got 'layernorm'"):
        StackRequest(norm="layernorm")


@pytest.mark.parametrize("norm", NORMS)
def test_rezero_is_the_identity_at_init(norm):
    # a = 0 on every write: the stack passes its input through, so the gradient reaches the
    # bottom untouched and the tokens keep their distance, for any depth and gain.
    for depth, gain in ((1, 0.5), (32, 1.0), (64, 2.0)):
        g = gradient_reach(StackRequest(depth=depth, gain=gain, residual="rezero", norm=norm))
        assert g.ratio == 1.0 and set(g.per_layer) == {1.0}
        assert len(set(g.stream_rms)) == 1
        c = token_collapse(StackRequest(depth=depth, gain=gain, residual="rezero", norm=norm,
                                        ffn=True))
        assert len(set(c.rel_distance)) == 1 and len(set(c.stream_rms)) == 1


class TwoCopies(registry.Residual):
    """A widened stream: two half-size copies; reading or closing sums them, a write goes
    half into each. The sum follows x + F(x) exactly, so it must match `plain`."""

    def open(self, x):
        return torch.stack([x / 2, x / 2], dim=-2)

    def close(self, stream):
        return stream.sum(dim=-2)

    def read(self, stream):
        return stream.sum(dim=-2)

    def forward(self, stream, write):
        return stream + write.unsqueeze(-2) / 2


def test_a_residual_that_widens_the_stream_works_as_its_module_does(monkeypatch):
    # A residual is its spec (depthlab.variants) and its registry entry.
    monkeypatch.setitem(RESIDUAL_SPECS, "_test_twocopies", ResidualSpec("_test_twocopies", "x ← x + F(x)", "none"))
    monkeypatch.setitem(registry.RESIDUAL_BUILDERS, "_test_twocopies", lambda cfg: TwoCopies())
    for norm in NORMS:
        wide = StackRequest(depth=9, gain=1.3, residual="_test_twocopies", norm=norm, ffn=True)
        plain = StackRequest(depth=9, gain=1.3, residual="plain", norm=norm, ffn=True)
        a, b = compare(wide, "gradient").to_json(), compare(plain, "gradient").to_json()
        # Both copies get the plain stream's gradient: the RMS over copies of each copy's
        # norm is plain's norm, and the same ratios.
        assert a["improved"]["grad_norm"] == pytest.approx(b["improved"]["grad_norm"], rel=1e-12)
        assert a["improved"]["per_layer"] == pytest.approx(b["improved"]["per_layer"], rel=1e-12)
        # RMS of the read-out close(stream), as the model's probes: the plain stream's.
        assert a["improved"]["stream_rms"] == pytest.approx(b["improved"]["stream_rms"], rel=1e-12)
        c, d = token_collapse(wide), token_collapse(plain)
        assert c.rel_distance == pytest.approx(d.rel_distance, rel=1e-12)
        assert c.stream_rms == pytest.approx(d.stream_rms, rel=1e-12)


def test_one_json_shape_for_every_mode():
    req = StackRequest(depth=5, gain=0.7, residual="scaled", norm="rmsnorm", seed=2)
    grad, coll = compare(req, "gradient").to_json(), compare(req, "collapse").to_json()
    assert grad.keys() == coll.keys() == {"kind", "request", "naive", "improved"}
    assert grad["request"] == req.to_json() and grad["request"]["residual"] == "scaled"
    assert grad["naive"].keys() == grad["improved"].keys() == {"ratio", "per_layer", "grad_norm",
                                                                "stream_rms", "trail"}
    assert coll["naive"].keys() == {"rel_distance", "mean_cosine", "stream_rms", "trail"}
    assert grad["naive"]["ratio"] == gradient_reach(req.naive()).ratio
    sweep = gain_sweep(req).to_json()
    assert sweep.keys() == {"kind", "request", "gains", "naive", "improved"}


def test_toy_config_is_a_model_config():
    from depthlab.config import ModelConfig

    cfg = StackRequest(depth=5, residual="scaled").config()
    assert isinstance(cfg, ModelConfig) and isinstance(cfg, ToyConfig)
    assert cfg.n_writes == 5 and cfg.write_scale == 1 / math.sqrt(5) and cfg.norm_eps == 1e-12
