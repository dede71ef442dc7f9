"""The page's numbers: each registered section's compute, cached and serialised.

`adapter(section)` wraps a section's compute (depthlab.web.sections) once: its answers
are kept in a bounded LRU keyed by the request (requests are frozen models), and one lock
serialises the torch work, so the server computes one section's probe at a time on one
thread (a hostile client can queue work but cannot pin more than one core with it). The
server looks an answer up with `peek` on the cheap path and sends only a miss to its
heavy pool (depthlab.web.pool). The built-in sections' adapters are also this module's
names (`simulate`, `paths`, ...), for the CLI-side callers and the tests.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

from depthlab.web import sections
from depthlab.web.schemas import AnatomyRequest, EmptyRequest, GrowthRequest, SimulateRequest, SweepRequest
from depthlab.web.sections import Section, anatomy_names

__all__ = ["MISS", "Answers", "adapter", "anatomy_names", "warm"]

_LOCK = threading.Lock()
_ADAPTERS: dict[str, Answers] = {}
MISS = object()  # what `peek` gives for a request not cached


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    maxsize: int
    currsize: int


class Answers:
    """A section's compute behind an LRU of at most `maxsize` answers, computed under the
    global lock. The key holds the request's repr beside it: -0.0 == 0.0 (and they hash
    alike), but the answer echoes its input, so a cached [0.0] must not answer [-0.0]."""

    def __init__(self, fn: Callable[[Any], Any], maxsize: int) -> None:
        self.__wrapped__ = fn
        self.maxsize = maxsize
        self._answers: OrderedDict[tuple[Any, str], Any] = OrderedDict()
        self._guard = threading.Lock()  # the dict's own, held for a look-up, never a compute
        self._hits = self._misses = 0

    def peek(self, req: Any) -> Any:
        """The cached answer for `req` (counted as a hit), or MISS; never computes."""
        key = (req, repr(req))
        with self._guard:
            if key not in self._answers:
                return MISS
            self._answers.move_to_end(key)
            self._hits += 1
            return self._answers[key]

    def __call__(self, req: Any) -> Any:
        found = self.peek(req)
        if found is not MISS:
            return found
        with _LOCK:
            found = self.peek(req)  # computed by the request this one waited for
            if found is not MISS:
                return found
            answer = self.__wrapped__(req)
        with self._guard:
            self._misses += 1
            self._answers[(req, repr(req))] = answer
            while len(self._answers) > self.maxsize:
                self._answers.popitem(last=False)
        return answer

    def cache_info(self) -> CacheInfo:
        with self._guard:
            return CacheInfo(self._hits, self._misses, self.maxsize, len(self._answers))

    def cache_clear(self) -> None:
        with self._guard:
            self._answers.clear()
            self._hits = self._misses = 0


def adapter(section: Section) -> Answers:
    """The section's cached compute: made at its first use, then the same one."""
    if section.name not in _ADAPTERS or _ADAPTERS[section.name].__wrapped__ is not section.compute:
        _ADAPTERS[section.name] = Answers(section.compute, section.lru)
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
