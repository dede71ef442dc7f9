"""The page's numbers: thin adapters from validated requests to the probes.

Each function takes a frozen request model and returns a JSON-ready dict. Results
are kept in an LRU keyed by the request, and one lock serialises the torch work,
so however many requests arrive, the server computes one probe at a time on one
thread (a hostile client can queue work but cannot pin more than one core).
"""

from __future__ import annotations

import threading
from functools import lru_cache, wraps

from depthlab.presets import PRESETS
from depthlab.probes import (
    anatomy_of,
    anatomy_of_preset,
    compare_norms,
    evolution_table,
    residual_paths,
    shipped_configs,
)
from depthlab.probes.simulator_mixing import composite_curves
from depthlab.web.messages import refusal
from depthlab.web.schemas import (
    AnatomyRequest,
    CompositeRequest,
    GrowthRequest,
    NormsRequest,
    PathsRequest,
    SimulateRequest,
    SweepRequest,
)

_LOCK = threading.Lock()


def _cached(maxsize: int):
    """LRU on the frozen request, computed under the global lock."""

    def deco(fn):
        cached = lru_cache(maxsize=maxsize)(fn)

        @wraps(fn)
        def call(req):
            with _LOCK:
                return cached(req)

        call.cache_info = cached.cache_info  # type: ignore[attr-defined]
        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return call

    return deco


def _stack(req: SimulateRequest | SweepRequest, **kw):
    from depthlab.probes.simulator import StackRequest

    return StackRequest(depth=req.n, residual=req.residual, norm=req.norm, **kw)


@_cached(maxsize=2048)
def simulate(req: SimulateRequest) -> dict:
    """Both rows of the simulator for one (mode, N, g, switches): the CLI's JSON shape."""
    from depthlab.probes.simulator import compare

    return compare(_stack(req, gain=req.g), req.mode).to_json()


@_cached(maxsize=512)
def sweep(req: SweepRequest) -> dict:
    """Bottom/top gradient ratio over g, naive and improved rows."""
    from depthlab.probes.simulator import gain_sweep

    return gain_sweep(_stack(req)).to_json()


@_cached(maxsize=64)
def composite(req: CompositeRequest) -> dict:
    """The composite gain of HC's and mHC's mixing matrices over depth (median, min-max)."""
    return composite_curves(req.streams, req.depth, req.spread, req.draws).to_json()


@_cached(maxsize=256)
def norms(req: NormsRequest) -> dict:
    """LayerNorm vs RMSNorm on one vector, by the model's own norm modules (gamma 1, beta 0)."""
    return compare_norms(req.x, req.eps).to_json()


@_cached(maxsize=256)
def paths(req: PathsRequest) -> dict:
    """x_N = (1 + a)^N x_0 expanded into 2^N gradient paths, grouped by sublayers passed."""
    return residual_paths(req.n, req.a).to_json()  # exact texts; a float past its range is null


@_cached(maxsize=64)
def growth(req: GrowthRequest) -> dict:
    """Stream RMS after each of `writes` unit-variance writes, measured, beside sqrt(1 + k)."""
    from depthlab.probes import GrowthRequest as ProbeGrowth
    from depthlab.probes import stream_growth

    return stream_growth(ProbeGrowth(writes=req.writes)).to_json()


def anatomy_names() -> dict[str, list[str]]:
    return {"presets": list(PRESETS), "configs": shipped_configs()}


@_cached(maxsize=64)
def anatomy(req: AnatomyRequest) -> dict:
    """Shapes per stage and parameters per component of a preset or a shipped config."""
    names = anatomy_names()
    # A shipped config is the real model: `gpt2` is GPT-2 itself (d 768, 12 layers), not
    # the course-sized preset of the same name.
    if req.config in names["configs"]:
        return anatomy_of(req.config, req.tokens).to_json()
    if req.config in names["presets"]:
        return anatomy_of_preset(req.config, req.tokens).to_json()
    allowed = ", ".join(names["presets"] + names["configs"])
    raise refusal("err.unknown_model", name=repr(req.config), allowed=allowed)


@lru_cache(maxsize=1)
def evolution() -> list[dict]:
    """The evolution table's rows, computed from the presets and shipped configs."""
    with _LOCK:
        return evolution_table()


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
