"""Every chart of the simulator is right for every state of every control, live and in
the static export: each N (1..64) and each g step (0.50..2.00) is visited, under every
setting of the switches (each residual of the registry, with and without the input norm it allows)
and both modes, and each chart must hold exactly the numbers the API
(or the embedded data) gives for that state, with finite, distinct, correct tick labels,
every value on its axis, no error and no console error. How long the page's tasks take
depends on the machine and its load: bench/page_long_tasks.py measures them against their
budgets (200 ms once started, 1 s at start-up); tests never time.

States: every (mode, toggles) pair at the four corners of the (N, g) square, then N = 1..64
each once with g walking all 31 steps (twice over), the pairs taking turns; then a drag of
each slider through every step, as a mouse would, ending on the deep end."""

from __future__ import annotations

import pytest
from page_harness import BROWSER_MARKS, CHECK_STATE, Watch

from depthlab.web.sections import switches

pytestmark = [*BROWSER_MARKS, pytest.mark.slow]


GAINS = [round(0.5 + 0.05 * i, 2) for i in range(31)]
# every setting the switches allow (the page turns the norm off for nGPT, which has none)
COMBOS = [{"mode": m, **sw} for m in ("gradient", "collapse") for sw in switches()]


def states() -> list[dict]:
    out = [dict(c, n=n, g=g) for c in COMBOS for n, g in ((1, 0.5), (64, 0.5), (64, 2.0), (1, 2.0))]
    out += [dict(COMBOS[i % len(COMBOS)], n=i + 1, g=GAINS[(i * 7) % len(GAINS)]) for i in range(64)]
    # the states the first report named
    out += [{"mode": "gradient", "n": 64, "g": 0.5, "residual": "scaled", "norm": "rmsnorm",
             "x0_mix": False},
            {"mode": "gradient", "n": 48, "g": 0.6, "residual": "none", "norm": "none",
             "x0_mix": False}]
    return out


def test_states_cover_every_slider_value():
    visited = states()
    assert {s["n"] for s in visited} == set(range(1, 65))
    assert {s["g"] for s in visited} == set(GAINS)
    assert {tuple(sorted((k, s[k]) for k in COMBOS[0])) for s in visited} == \
        {tuple(sorted(c.items())) for c in COMBOS}


def drag(page, slider: str, values) -> None:
    """One input event per animation frame through every value, as a mouse drag sends them."""
    page.evaluate("""async ([id, values]) => { const el = document.getElementById(id);
        for (const v of values) { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true}));
                                  await new Promise((r) => requestAnimationFrame(r)); } }""", [slider, values])


def sweep(page, url: str, want_from: str) -> list[str]:
    watch = Watch(page)
    page.goto(url + "#lang=en&n=32&g=1.00")
    page.wait_for_function("() => window.DL && DL.ready", timeout=20000)
    bad = []
    for st in states():
        bad += page.evaluate(CHECK_STATE, [st, want_from])
        if len(bad) > 20:
            break
    # drags: N through 1..64 and g through every step, ending deep; the charts end on the last state
    page.evaluate(CHECK_STATE, [{"mode": "gradient", "n": 1, "g": 1.0, "residual": "plain", "norm": "none"}, want_from])
    drag(page, "n", list(range(1, 65)))
    drag(page, "g", [f"{g:.2f}" for g in reversed(GAINS)])
    bad += page.evaluate(CHECK_STATE, [{}, want_from])
    bad += [f"console: {e}" for e in watch.errors]
    return bad


def test_every_state_live(live_empty, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900}, locale="en-US")
    bad = sweep(page, live_empty, "api")
    page.close()
    assert bad == []


def test_every_state_exported(exported_small, browser):
    page = browser.new_page(viewport={"width": 390, "height": 844}, locale="en-US")
    bad = sweep(page, exported_small, "static")
    page.close()
    assert bad == []
