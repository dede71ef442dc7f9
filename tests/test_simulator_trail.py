"""The simulator's head-to-tail picture: one token through the first writes of the red and
the green stack (depthlab.probes.simulator.Trail), checked against the stack recomputed by
hand from the documented recipe (weights ~ normal(0, g^2 / fan_in) from the (seed, N)
generator), at the slider ends and between them.
"""

import json
import math

import pytest
import torch

from depthlab.config import RESIDUALS
from depthlab.locales import LANGS, table
from depthlab.probes.simulator import TRAIL_WRITES, StackRequest, Trail, compare
from depthlab.probes.simulator_bounds import PAGE_GAINS, PAGE_MAX_DEPTH
from depthlab.variants import RESIDUAL_SPECS

F64 = torch.float64

# N and g at the slider ends and between them; N below, at and above the writes drawn
SETTINGS = [(1, PAGE_GAINS[0]), (2, 1.0), (TRAIL_WRITES, PAGE_GAINS[1]), (TRAIL_WRITES + 1, 0.75),
            (32, 1.0), (PAGE_MAX_DEPTH, PAGE_GAINS[0]), (PAGE_MAX_DEPTH, PAGE_GAINS[1])]


def by_hand(req: StackRequest, mode: str, add: bool) -> list[torch.Tensor]:
    """The stack's states [T, D], input first, for the first writes: x <- F(x) or x + F(x)."""
    salt = {"gradient": 1, "collapse": 2}[mode]
    gen = torch.Generator().manual_seed(req.seed * 1_000_003 + req.depth * 1009 + salt)
    per = 2 if mode == "gradient" else 3
    w = torch.randn(per * req.depth, req.width, req.width, generator=gen, dtype=F64)
    w = req.gain * w / math.sqrt(req.width)
    x = torch.randn(req.tokens, req.width, generator=torch.Generator().manual_seed(req.seed),
                    dtype=F64)
    states = [x]
    for k in range(min(req.depth, TRAIL_WRITES)):
        if mode == "gradient":
            f = torch.tanh(x @ w[2 * k]) @ w[2 * k + 1]
        else:
            q, kk, v = x @ w[3 * k], x @ w[3 * k + 1], x @ w[3 * k + 2]
            scores = q @ kk.T / math.sqrt(req.width)
            scores = scores.masked_fill(torch.ones(req.tokens, req.tokens).triu(1).bool(), -math.inf)
            f = scores.softmax(-1) @ v
        x = x + f if add else f
        states.append(x)
    return states


def close(a: torch.Tensor, b: torch.Tensor, scale: float) -> bool:
    # float64 through at most 6 sublayers of width 16: rounding is ~1e-15 of the scale
    return float((a - b).abs().max()) <= 1e-10 * scale


@pytest.mark.parametrize("mode", ["gradient", "collapse"])
@pytest.mark.parametrize("n,g", SETTINGS)
def test_red_states_are_f_applied_again_and_green_tips_are_the_sum_of_writes(mode, n, g):
    req = StackRequest(depth=n, gain=g, residual="plain")
    result = compare(req, mode)
    k = min(n, TRAIL_WRITES)
    for trail, add in ((result.naive.trail, False), (result.improved.trail, True)):
        assert trail.token == req.tokens - 1
        assert len(trail.states) == k + 1 and len(trail.writes) == k
        want = by_hand(req, mode, add)
        got = torch.tensor(trail.states, dtype=F64)
        for s, h in zip(got, want, strict=True):
            assert close(s, h[-1], float(h[-1].abs().max()) + 1e-300)
        assert trail.rule == ("add" if add else "replace")
    red, green = result.naive.trail, result.improved.trail
    # red: each state is the write that replaced it
    assert red.states[1:] == red.writes
    # green, as the page draws it: the tips, projected, are x0 plus the writes projected
    basis, _ = green.plane()
    writes = torch.tensor(green.writes, dtype=F64) @ basis.T
    xy = torch.tensor(result.to_json()["improved"]["trail"]["xy"], dtype=F64).view(-1, 2)
    tips = xy[0] + torch.cumsum(writes, dim=0)
    assert close(tips, xy[1:], float(xy.abs().max()))


@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize("mode", ["gradient", "collapse"])
def test_the_rule_is_measured_for_every_residual(residual, mode):
    t = compare(StackRequest(depth=12, gain=1.0, residual=residual), mode).improved.trail
    js = t.to_json()
    expected = RESIDUAL_SPECS[residual].write_rule  # the spec states it; the trail measures it
    assert js["rule"] == expected
    assert ("wxy" in js) == (expected == "other")
    if residual == "rezero":  # a = 0 at init: nothing is written, the token stays put
        assert js["wlen"] == [0.0] * TRAIL_WRITES and js["reading"] == "read.trail.still"
        assert len(set(js["len"])) == 1


@pytest.mark.parametrize("n,g", SETTINGS)
def test_the_plane_is_the_best_through_the_origin_and_its_share_is_right(n, g):
    t = compare(StackRequest(depth=n, gain=g, residual="scaled"), "gradient").improved.trail
    basis, kept = t.plane()
    assert torch.allclose(basis @ basis.T, torch.eye(2, dtype=F64), atol=1e-12)
    rows = torch.tensor(t.states + t.writes, dtype=F64)
    unit = rows / rows.norm(dim=1, keepdim=True)
    share = lambda b: float(((unit @ b.T) ** 2).sum(dim=1).mean())
    assert kept == pytest.approx(share(basis), rel=1e-12)
    assert 0 < kept <= 1 + 1e-12
    gen = torch.Generator().manual_seed(n)
    for _ in range(20):  # no other plane through the origin keeps more
        q, _ = torch.linalg.qr(torch.randn(rows.shape[1], 2, generator=gen, dtype=F64))
        assert share(q.T) <= kept + 1e-12
    js = t.to_json()
    assert js["kept"] == kept
    xy = torch.tensor(js["xy"], dtype=F64).view(-1, 2)
    assert close(xy, torch.tensor(t.states, dtype=F64) @ basis.T, float(rows.abs().max()))
    assert xy[0, 0] > 0  # the input points right
    assert js["len"] == pytest.approx([math.dist(s, [0] * len(s)) for s in t.states], rel=1e-12)


def test_the_reading_names_a_sentence_of_both_languages_and_its_numbers():
    for residual, key in (("none", "read.trail.replace"), ("plain", "read.trail.add"),
                          ("rezero", "read.trail.still"), ("deepnorm", "read.trail.other")):
        t = compare(StackRequest(depth=8, gain=1.5, residual=residual), "gradient").improved.trail
        js = t.to_json()
        assert js["reading"] == key
        w = torch.tensor(t.writes, dtype=F64)
        assert js["wmean"] == pytest.approx(float(w.norm(dim=1).mean()), rel=1e-12)
        for lang in LANGS:  # the page fills these fields from the trail's numbers
            table(lang)[key].format(row="x", k=6, first="1", last="2", w="3")


def test_a_trail_of_one_write_has_two_states():
    t = Trail(token=0, states=((1.0, 0.0), (1.0, 2.0)), writes=((0.0, 2.0),))
    js = t.to_json()
    assert js["rule"] == "add" and js["kept"] == pytest.approx(1.0)  # width 2: the plane is all
    xy = torch.tensor(js["xy"], dtype=F64).view(-1, 2)
    assert xy.norm(dim=1).tolist() == pytest.approx([1.0, math.sqrt(5)], rel=1e-12)
    assert js["len"] == pytest.approx([1.0, math.sqrt(5)], rel=1e-12) and js["wlen"] == [2.0]


def test_the_static_export_carries_each_rows_trail_rounded_and_small(monkeypatch):
    from depthlab.web import export, sections

    monkeypatch.setitem(sections.GRIDS, "tiny", {"n": (2,), "g": (1.0,), "g_step": 1.0})
    answers, _ = export.section_answers(sections.section("simulate"), "tiny")
    answers = export._round(answers)  # as static_sections rounds them
    assert len(answers) == 2 * len(sections.switches()) + len(sections.mixer_switches())  # + collapse mixers
    for answer in answers.values():
        for row in (answer["naive"], answer["improved"]):
            t = row["trail"]
            assert len(t["xy"]) == 2 * 3 and len(t["len"]) == 3 and len(t["wlen"]) == 2
            assert all(v == float(f"{v:.3g}") for v in t["xy"] + t["len"] + t["wlen"])
            assert len(json.dumps(t, separators=(",", ":"))) < 300


@pytest.mark.parametrize("g", [1e-46, 1e-200])
def test_writes_that_underflow_still_leave_a_plane(g):
    """At a gain the CLI allows and the page does not, every write underflows to zero and
    the drawn vectors are the input alone: the plane is still two orthonormal axes (it
    was an IndexError), the first along the input, and the picture keeps all of it."""
    t = compare(StackRequest(depth=2, gain=g), "gradient").naive.trail
    basis, kept = t.plane()
    assert torch.allclose(basis @ basis.T, torch.eye(2, dtype=F64), atol=1e-12)
    assert kept == pytest.approx(1.0, rel=1e-12)
    json.dumps(t.to_json(), allow_nan=False)
