"""The page's sections with server data, one entry each: the registry the server, its
cache, the static export and /api/meta all read.

A `Section` names its route (method, path, tag, summary, the 4xx it answers), its request
model, the function that computes its answer, the size of its answer cache, and the
requests a static copy embeds. From `SECTIONS`, `depthlab.web.app` makes the routes,
`depthlab.web.compute` wraps each compute once in its cache and lock,
`depthlab.web.export` stores each static answer under `sections[name][request_key(req)]`,
and /api/meta lists them (`listing`). The page reads both sources through one call,
`DL.source.section(name, req)` (static/js/api.js), whose `DL.sectionKey` is
`request_key` in JavaScript (tests/test_sections.py runs both on the same requests).

The experiments' routes (depthlab.web.runs: files on disk, a background run) and the
real-model router (depthlab.web.realmodel: a run's checkpoint, a disk cache) stay
outside: their answers are not a function of the request alone.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Path as PathParam
from fastapi import Query
from pydantic import BaseModel

from depthlab.config import PLACEMENTS, RESIDUALS
from depthlab.presets import PRESETS, get_preset
from depthlab.probes import (
    anatomy_of,
    anatomy_of_preset,
    compare_norms,
    evolution_table,
    residual_paths,
    shipped_configs,
)
from depthlab.probes.simulator_bounds import NORMS, SIM_MIXERS
from depthlab.probes.simulator_mixing import composite_curves
from depthlab.variants import RESIDUAL_SPECS, keys_where
from depthlab.web import lesson
from depthlab.web.messages import refusal
from depthlab.web.schemas import (
    DELTANET_REFUSED,
    AnatomyRequest,
    BlockRequest,
    CompositeRequest,
    EmptyRequest,
    GrowthRequest,
    NormsRequest,
    PathsRequest,
    SimulateRequest,
    SweepRequest,
)


@dataclass(frozen=True)
class Section:
    """One section's server side. `static(grid)` gives the requests a static copy answers
    for an export grid ("standard", "small"); None: a static copy has no answers (the page
    computes them itself, as the norms calculator does). `params` is a GET route's
    parameters, as a FastAPI dependency that returns the request; a POST takes the request
    model as its JSON body. `script` is the section's own JS module (a file under static/,
    defining `DL.figures[name]`), for a section that is not one of index.html's."""

    name: str
    method: Literal["GET", "POST"]
    path: str
    request: type[BaseModel]
    compute: Callable[[Any], Any]
    tag: str
    summary: str
    lru: int = 64
    static: Callable[[str], Iterable[BaseModel]] | None = None
    params: Callable[..., BaseModel] | None = None
    responses: tuple[int, ...] = ()
    answer: Any = dict  # the route's response type (a list for a table)
    script: str | None = None  # its JS module under static/, loaded before main.js (page_html)
    after: str | None = None  # the page box it follows (a name of PAGE); None: the last


# ---- the canonical key of a request ------------------------------------------------------
def js_number(x: int | float) -> str:
    """A number as JavaScript's String(x) writes it (ECMA-262 Number::toString): the
    shortest digits that read back as x, in plain notation for 1e-7 < |x| < 1e21."""
    if isinstance(x, bool):
        raise TypeError("a boolean is not a number here")
    if isinstance(x, int):
        return str(x)
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError(f"{x!r} has no JSON form")
    if x == 0:
        return "0"
    sign, digits, exp = Decimal(repr(abs(x))).normalize().as_tuple()
    d = "".join(map(str, digits))
    k, n = len(d), len(d) + int(exp)  # x = 0.d × 10^n
    minus = "-" if x < 0 else ""
    if k <= n <= 21:
        return minus + d + "0" * (n - k)
    if 0 < n <= 21:
        return minus + d[:n] + "." + d[n:]
    if -6 < n <= 0:
        return minus + "0." + "0" * -n + d
    e = n - 1
    mantissa = d if k == 1 else d[0] + "." + d[1:]
    return f"{minus}{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"


def _canonical(v: Any) -> str:
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, (int, float)):
        return js_number(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_canonical(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _canonical(v[k])
                              for k in sorted(v)) + "}"
    raise TypeError(f"{type(v).__name__} has no key form")


def request_key(req: BaseModel | dict) -> str:
    """A request's key in a static copy: the JSON of its fields (defaults included) sorted
    by name, without spaces, each number as JavaScript's String(number) writes it, strings
    as JSON.stringify writes them (UTF-8, not \\u-escaped). api.js's DL.sectionKey is the
    same function of the request with the section's defaults filled in. (Field names are
    identifiers, so Python's sort and JavaScript's agree.)"""
    fields = req.model_dump(mode="json") if isinstance(req, BaseModel) else req
    return _canonical(dict(fields))


def defaults(model: type[BaseModel]) -> dict:
    """The fields a request may leave out, with their values (a static lookup fills them in)."""
    return {name: f.get_default(call_default_factory=True)
            for name, f in model.model_fields.items() if not f.is_required()}


# ---- the built-in sections' computations --------------------------------------------------
def _stack(req: SimulateRequest | SweepRequest, **kw):
    """The simulator's stack for the switches; the two rules that tie a switch to the
    residual (the schema's allOf) refused here in the page's language, before the
    simulator's own check says the same in English."""
    from depthlab.probes.simulator import StackRequest

    spec = RESIDUAL_SPECS[req.residual]
    if req.x0_mix and not spec.takes_x0_mix:
        raise refusal("err.x0_mix_with", residual=req.residual,
                      allowed=", ".join(keys_where(lambda s: s.takes_x0_mix)))
    if req.norm != "none" and spec.needs_no_norm:
        raise refusal("err.norm_with", residual=req.residual)
    if req.mixer != "attention" and getattr(req, "mode", "gradient") == "gradient":
        raise refusal("err.mixer_mode", required="attention", mode="gradient", collapse="collapse")
    if req.mixer != "attention" and req.residual in DELTANET_REFUSED:
        raise refusal("err.mixer_with", residual=req.residual, required="attention",
                      allowed=", ".join(r for r in RESIDUAL_SPECS if r not in DELTANET_REFUSED))
    return StackRequest(depth=req.n, residual=req.residual, norm=req.norm, x0_mix=req.x0_mix,
                        mixer=req.mixer, **kw)


def simulate(req: SimulateRequest) -> dict:
    """Both rows of the simulator for one (mode, N, g, switches): the CLI's JSON shape."""
    from depthlab.probes.simulator import compare

    return compare(_stack(req, gain=req.g), req.mode).to_json()


def sweep(req: SweepRequest) -> dict:
    """Bottom/top gradient ratio over g, naive and improved rows."""
    from depthlab.probes.simulator import gain_sweep

    return gain_sweep(_stack(req)).to_json()


def composite(req: CompositeRequest) -> dict:
    """The composite gain of HC's and mHC's mixing matrices over depth (median, min-max)."""
    return composite_curves(req.streams, req.depth, req.spread, req.draws).to_json()


def norms(req: NormsRequest) -> dict:
    """LayerNorm vs RMSNorm on one vector, by the model's own norm modules (gamma 1, beta 0)."""
    return compare_norms(req.x, req.eps).to_json()


def paths(req: PathsRequest) -> dict:
    """x_N = (1 + a)^N x_0 expanded into 2^N gradient paths, grouped by sublayers passed."""
    return residual_paths(req.n, req.a).to_json()  # exact texts; a float past its range is null


def growth(req: GrowthRequest) -> dict:
    """Stream RMS after each of `writes` unit-variance writes, measured, beside sqrt(1 + k)."""
    from depthlab.probes import GrowthRequest as ProbeGrowth
    from depthlab.probes import stream_growth

    return stream_growth(ProbeGrowth(writes=req.writes)).to_json()


def anatomy_names() -> dict[str, list[str]]:
    """The models the anatomy can describe: the presets and the shipped configs."""
    return {"presets": list(PRESETS), "configs": shipped_configs()}


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


def evolution(req: EmptyRequest) -> list[dict]:
    """The evolution table's rows, computed from the presets and shipped configs."""
    return evolution_table()


def block(req: BlockRequest) -> dict:
    """One block of a preset (optionally with another placement), for the diagram."""
    return lesson.block(req.preset, req.placement)


# ---- what a static copy holds --------------------------------------------------------------
# The simulator's slider positions. "standard": N in 11 depths and g from 0.5 to 2.0 in
# steps of 0.1 (16 values), every residual of the registry with and without the input norm,
# and x0 mixing on the plain residual (switches()), both modes. The page snaps its sliders
# to the grid (api.js `snap`).
GRIDS = {
    "standard": {"n": (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64),
                 "g": tuple(round(0.5 + 0.1 * i, 2) for i in range(16)), "g_step": 0.1},
    "small": {"n": (2, 8, 32, 64), "g": (0.5, 1.0, 1.5, 2.0), "g_step": 0.5},
}
ANATOMY = ("course", "lesson-anchor")
# The formula's (N, a) a static copy holds, exact like the API's (the page moves its inputs
# to the nearest). About 0.5 MB.
PATHS_GRID = {"n": (1, 2, 3, 4, 5, 8, 10, 16, 32, 64),
              "a": ("-10", "-2", "-1.5", "-1", "-0.5", "-0.1", "0", "0.1", "0.5", "1", "2", "10")}


# The residuals whose x0-mixing rows a static copy holds: the plain residual only, which
# keeps the export about 12% larger rather than 59% with every residual the switch applies
# to (the page says "not in this static copy" for the others: meta's simulator.x0_static).
STATIC_X0_MIX = ("plain",)


def switches() -> list[dict]:
    """The page's switch settings a static copy holds: each residual of the registry, each
    input norm it allows (none only for a residual that keeps the stream normalised itself),
    without x0 mixing, and with it for the residuals of STATIC_X0_MIX."""
    return [{"residual": r, "norm": n, "x0_mix": x0}
            for r, n, x0 in itertools.product(RESIDUALS, NORMS, (False, True))
            if (n == "none" or not RESIDUAL_SPECS[r].needs_no_norm) and (not x0 or r in STATIC_X0_MIX)]


# The residuals whose rows with another token mixer (collapse mode only: gradient mode has
# none) a static copy holds, like STATIC_X0_MIX: the plain residual, with and without the
# norm (meta's simulator.mixer_static; the page says "not in this static copy" elsewhere):
# 10% more simulate answers (measured on the small grid, bytes of the rounded JSON).
STATIC_MIXERS = ("plain",)


def mixer_switches() -> list[dict]:
    """The collapse-mode settings with a mixer other than attention a static copy holds."""
    return [{"residual": r, "norm": n, "x0_mix": False, "mixer": m}
            for r, n, m in itertools.product(STATIC_MIXERS, NORMS, SIM_MIXERS)
            if m != "attention" and (n == "none" or not RESIDUAL_SPECS[r].needs_no_norm)]


def _static_simulate(grid: str) -> list[SimulateRequest]:
    g = GRIDS[grid]
    return [SimulateRequest(mode=mode, n=n, g=gain, **sw) for n in g["n"] for sw in switches()
            for gain in g["g"] for mode in ("gradient", "collapse")] + [
        SimulateRequest(mode="collapse", n=n, g=gain, **sw) for n in g["n"]
        for sw in mixer_switches() for gain in g["g"]]


def _static_sweep(grid: str) -> list[SweepRequest]:
    return [SweepRequest(n=n, **sw) for n in GRIDS[grid]["n"] for sw in switches()]


def _static_paths(grid: str) -> list[PathsRequest]:
    return [PathsRequest(n=n, a=float(a)) for n in PATHS_GRID["n"] for a in PATHS_GRID["a"]]


def _static_blocks(grid: str) -> list[BlockRequest]:
    """Each preset as it is, and with each placement where it has a norm to place."""
    return [BlockRequest(preset=p, placement=place) for p in PRESETS
            for place in (None, *(PLACEMENTS if get_preset(p).model.norm != "none" else ()))]


# ---- GET routes' parameters ----------------------------------------------------------------
PresetName = Literal[tuple(PRESETS)]  # type: ignore[valid-type]
Placement = Literal[PLACEMENTS]  # type: ignore[valid-type]


def _block_params(preset: Annotated[PresetName, Query()] = "course",
                  placement: Annotated[Placement | None, Query()] = None) -> BlockRequest:
    return BlockRequest(preset=preset, placement=placement)


ModelName = Literal[tuple(dict.fromkeys(sum(anatomy_names().values(), [])))]  # type: ignore[valid-type]


def _anatomy_params(config: Annotated[ModelName, PathParam()],
                    tokens: Annotated[int, Query(ge=1, le=64)] = 5) -> AnatomyRequest:
    return AnatomyRequest(config=config, tokens=tokens)


SECTIONS: list[Section] = [
    Section("simulate", "POST", "/api/simulate", SimulateRequest, simulate, "simulator",
            "Naive (red) and improved (green) stack for one N, g and switches", lru=2048,
            static=_static_simulate, responses=(400,)),
    Section("sweep", "POST", "/api/sweep", SweepRequest, sweep, "simulator",
            "Bottom/top gradient ratio over g in [0.5, 2.0], both rows", lru=512,
            static=_static_sweep, responses=(400,)),
    Section("composite", "POST", "/api/composite", CompositeRequest, composite, "simulator",
            "Composite gain of HC's and mHC's mixing matrices over depth",
            static=lambda grid: [CompositeRequest()]),
    Section("paths", "POST", "/api/paths", PathsRequest, paths, "arithmetic",
            "Residual path expansion (1 + a)^N", lru=256, static=_static_paths),
    Section("norms", "POST", "/api/norms", NormsRequest, norms, "arithmetic",
            "LayerNorm vs RMSNorm on one vector", lru=256),  # a static copy computes it (api.js)
    Section("growth", "POST", "/api/growth", GrowthRequest, growth, "simulator",
            "Stream RMS after each write vs sqrt(1 + k)", static=lambda grid: [GrowthRequest()]),
    Section("block", "GET", "/api/block", BlockRequest, block, "model",
            "One block of a preset, for the diagram", static=_static_blocks, params=_block_params),
    Section("anatomy", "GET", "/api/anatomy/{config}", AnatomyRequest, anatomy, "model",
            "Shapes per stage and parameters per component of one model",
            static=lambda grid: [AnatomyRequest(config=n) for n in ANATOMY], params=_anatomy_params),
    Section("evolution", "GET", "/api/evolution", EmptyRequest, evolution, "model",
            "The evolution table, computed from configs", lru=1,
            static=lambda grid: [EmptyRequest()], answer=list[dict]),
]


def section(name: str) -> Section:
    """The registered section called `name`."""
    for s in SECTIONS:
        if s.name == name:
            return s
    raise KeyError(f"no page section {name!r}; registered: {', '.join(s.name for s in SECTIONS)}")


# ---- the page's order ----------------------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    """One box of the page: its `<section id=NAME>` (in index.html, or built by its module),
    the `DL.figures[NAME]` that draws it (none for a box of prose), the URL state keys it
    redraws on (state.js), and the scripts that define it."""

    name: str
    state: tuple[str, ...] = ()
    scripts: tuple[str, ...] = ()


# The built-in boxes in the lesson's order. main.js builds the figures and routes the URL
# state from this list (published as /api/meta's `page`) and puts the boxes in its order;
# a section with a module of its own goes after the box its `after` names.
PAGE: list[Figure] = [
    Figure("question"),
    Figure("dataflow", ("flow", "stage"), ("js/figures.js",)),
    Figure("simulator", ("mode", "n", "g", "residual", "norm", "x0", "mixer"), ("js/simulator.js",)),
    Figure("formula", ("pn", "pa"), ("js/figures.js",)),
    Figure("growth", (), ("js/figures.js",)),
    Figure("block", ("preset", "place"), ("js/figures.js",)),
    Figure("norms", ("vec",), ("js/figures.js",)),
    Figure("evolution", (), ("js/figures.js",)),
    Figure("project", (), ("js/project.js",)),
    Figure("realmodel", ("rrun", "rp", "rtext", "rtgt"), ("js/realmodel_views.js", "js/realmodel.js")),
    Figure("misconceptions"),
    Figure("beyond", (), ("js/beyond.js",)),
    Figure("race", (), ("js/race.js",)),
]


def page_figures() -> list[Figure]:
    """Every box of the page in its order: PAGE, with each section that has a module of
    its own placed after the box its `after` names (at the end without one)."""
    order = list(PAGE)
    for s in SECTIONS:
        if s.script:
            fig = Figure(s.name, (), (s.script,))
            names = [f.name for f in order]
            if s.after is not None and s.after not in names:
                raise ValueError(f"section {s.name!r}: after={s.after!r} is no box of the page; "
                                 f"one of: {', '.join(names)}")
            order.insert(names.index(s.after) + 1 if s.after else len(order), fig)
    return order


def page_order() -> list[dict]:
    """What /api/meta says of the page's boxes: each name and the state keys it redraws on."""
    return [{"name": f.name, "state": list(f.state)} for f in page_figures()]


STATIC = Path(__file__).parent / "static"
MAIN_JS = '<script src="static/js/main.js"></script>'


def page_html() -> str:
    """index.html with a <script> tag for each box's scripts (PAGE, then the sections' own
    modules), before main.js, which builds every figure they define. The server sends it;
    a static copy inlines it."""
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    scripts = dict.fromkeys(script for f in page_figures() for script in f.scripts)
    tags = "".join(f'<script src="static/{script}"></script>\n' for script in scripts)
    return html.replace(MAIN_JS, tags + MAIN_JS, 1)


def listing() -> list[dict]:
    """What /api/meta says of each section: its name, method and path, and the defaults
    of its request (which a static copy's key fills in)."""
    return [{"name": s.name, "method": s.method, "path": s.path, "defaults": defaults(s.request)}
            for s in SECTIONS]
