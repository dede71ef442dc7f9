"""The page's numbers: each registered section's compute, cached and serialised.

`adapter(section)` wraps a section's compute (depthlab.web.sections) once: its answers
are kept in an LRU keyed by the request (requests are frozen models), and one lock
serialises the torch work, so however many requests arrive, the server computes one
probe at a time on one thread (a hostile client can queue work but cannot pin more than
one core). The built-in sections' adapters are also this module's names (`simulate`,
`paths`, ...), for the CLI-side callers and the tests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache, wraps
from typing import Any

from depthlab.web import sections
from depthlab.web.schemas import AnatomyRequest, EmptyRequest, GrowthRequest, SimulateRequest, SweepRequest
from depthlab.web.sections import Section, anatomy_names

__all__ = ["adapter", "anatomy_names", "warm"]

_LOCK = threading.Lock()
_ADAPTERS: dict[str, Callable[[Any], Any]] = {}


def _cached(fn: Callable[[Any], Any], maxsize: int) -> Callable[[Any], Any]:
    """LRU on the frozen request, computed under the global lock. The key holds the
    request's repr beside it: -0.0 == 0.0 (and they hash alike), but the answer echoes its
    input, so a cached [0.0] must not answer [-0.0]."""
    cached = lru_cache(maxsize=maxsize)(lambda req, _text: fn(req))

    @wraps(fn)
    def call(req):
        with _LOCK:
            return cached(req, repr(req))

    call.cache_info = cached.cache_info  # type: ignore[attr-defined]
    call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return call


def adapter(section: Section) -> Callable[[Any], Any]:
    """The section's cached compute: made at its first use, then the same one."""
    if section.name not in _ADAPTERS or _ADAPTERS[section.name].__wrapped__ is not section.compute:  # type: ignore[attr-defined]
        _ADAPTERS[section.name] = _cached(section.compute, section.lru)
    return _ADAPTERS[section.name]


simulate = adapter(sections.section("simulate"))
sweep = adapter(sections.section("sweep"))
composite = adapter(sections.section("composite"))
norms = adapter(sections.section("norms"))
paths = adapter(sections.section("paths"))
growth = adapter(sections.section("growth"))
anatomy = adapter(sections.section("anatomy"))
block = adapter(sections.section("block"))
_evolution = adapter(sections.section("evolution"))


def evolution() -> list[dict]:
    """The evolution table's rows, computed from the presets and shipped configs."""
    return _evolution(EmptyRequest())


def warm() -> None:
    """Compute what the page asks for first (its default view), so the first visit is quick."""
    try:
        simulate(SimulateRequest())
        sweep(SweepRequest())
        for name in ("course", "lesson-anchor"):
            anatomy(AnatomyRequest(config=name))
        evolution()
        growth(GrowthRequest())
    except Exception:  # noqa: BLE001 - warming is best effort; a request will report the error
        pass
