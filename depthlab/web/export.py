"""`depthlab export-page DIR`: one self-contained HTML file that opens from disk.

The page's own scripts and styles are inlined, and its data are embedded as JSON:
the simulator precomputed on a grid of slider positions (GRIDS), the sweeps over g,
the anatomy, evolution table, growth, block diagrams and every experiment's
export.json, and the real-model probes of the shipped prompts on one run
(depthlab.web.realmodel.static_results), and the formula's exact arithmetic on a grid of N
and a (PATHS_GRID). The same JavaScript reads that data instead of calling the API
(static/js/api.js, `embedded`), with both languages' text tables (depthlab.locales).
Floats are rounded to 4 significant digits; exact values travel as the server's text.
"""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, datetime
from pathlib import Path

from depthlab.atomic import atomic_write_text
from depthlab.locales import LANGS, table
from depthlab.outdir import writable_dir
from depthlab.probes.simulator_bounds import NORM_FREE_RESIDUALS, NORMS, RESIDUAL_CHOICES
from depthlab.progress import Progress
from depthlab.web import compute, lesson, realmodel
from depthlab.web.runs import Runs
from depthlab.web.schemas import (
    AnatomyRequest,
    CompositeRequest,
    GrowthRequest,
    PathsRequest,
    SimulateRequest,
    SweepRequest,
)

STATIC = Path(__file__).parent / "static"

# The slider positions a static copy holds. "standard": N in 11 depths and g from 0.5 to
# 2.0 in steps of 0.1 (16 values), every residual of the registry with and without the
# input norm (switches()), both modes: about 1.6 MB (1,408 improved rows per mode) with the
# four residuals of today. The page snaps its sliders to the grid.
GRIDS = {
    "standard": {"n": (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64),
                 "g": tuple(round(0.5 + 0.1 * i, 2) for i in range(16)), "g_step": 0.1},
    "small": {"n": (2, 8, 32, 64), "g": (0.5, 1.0, 1.5, 2.0), "g_step": 0.5},
}
ANATOMY = ("course", "lesson-anchor")
# The formula's (N, a) a static copy holds, exact like the API's (the page moves its inputs
# to the nearest). a is written as JavaScript writes the number (String(-0.5) = "-0.5"),
# since the page looks an answer up by that key. About 0.5 MB.
PATHS_GRID = {"n": (1, 2, 3, 4, 5, 8, 10, 16, 32, 64),
              "a": ("-10", "-2", "-1.5", "-1", "-0.5", "-0.1", "0", "0.1", "0.5", "1", "2", "10")}


def switches() -> list[dict]:
    """Every value of the page's switches: each residual of the registry, each input norm
    it allows (none only for a residual that keeps the stream normalised itself)."""
    return [{"residual": r, "norm": n} for r, n in itertools.product(RESIDUAL_CHOICES, NORMS)
            if n == "none" or r not in NORM_FREE_RESIDUALS]


def switch_key(sw: dict) -> str:
    """The export's key of one setting, "residual|norm" (api.js builds the same)."""
    return f"{sw['residual']}|{sw['norm']}"


def _round(obj):
    """4 significant digits for every float (keeps the file small; the page shows 3)."""
    if isinstance(obj, float):
        return float(f"{obj:.4g}")
    if isinstance(obj, dict):
        return {k: _round(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_round(v) for v in obj]
    return obj


def simulator_grid(grid: dict, progress: bool = False) -> dict:
    """The naive row per (mode, N, g), the improved row per (mode, N, g, switches) and the
    sweep per (N, switches), each in the shape /api/simulate and /api/sweep send."""
    naive: dict = {"gradient": {}, "collapse": {}}
    improved: dict = {"gradient": {}, "collapse": {}}
    sweeps: dict = {}
    bar = Progress(len(grid["n"]), desc="export-page: precomputing the simulator", unit="depth",
                   enabled=progress, each_item=True)
    for i, n in enumerate(grid["n"]):
        for sw in switches():
            sweeps[f"{n}|{switch_key(sw)}"] = compute.sweep(SweepRequest(n=n, **sw))
            for g, mode in itertools.product(grid["g"], ("gradient", "collapse")):
                r = compute.simulate(SimulateRequest(mode=mode, n=n, g=g, **sw))
                key = f"{n}|{g:.2f}"
                naive[mode][key] = r["naive"]
                improved[mode][f"{key}|{switch_key(sw)}"] = r["improved"]
        bar.report(i + 1, depth=f"N = {n} done")
    bar.close()
    return {"naive": naive, "improved": improved, "sweep": sweeps}


def paths_grid() -> dict:
    """/api/paths's answers on PATHS_GRID, keyed "N|a"."""
    return {f"{n}|{a}": compute.paths(PathsRequest(n=n, a=float(a)))
            for n in PATHS_GRID["n"] for a in PATHS_GRID["a"]}


def page_data(runs_dir: Path, grid: str = "standard", progress: bool = False) -> dict:
    from depthlab import __version__
    from depthlab.config import PLACEMENTS

    g = GRIDS[grid]
    data = {"meta": {"version": __version__, "mode": "static",
                     "exported_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "grid": {"n": list(g["n"]), "g": list(g["g"]), "g_step": g["g_step"]},
                     **lesson.page_facts()},
            "grid": {"n": list(g["n"]), "g": list(g["g"])},
            "locales": {lang: table(lang) for lang in LANGS}}
    data.update(simulator_grid(g, progress))
    data["paths"] = paths_grid()
    data["paths_grid"] = {"n": list(PATHS_GRID["n"]), "a": [float(a) for a in PATHS_GRID["a"]]}
    data["meta"]["paths_grid"] = data["paths_grid"]
    data["growth"] = compute.growth(GrowthRequest())
    data["blocks"] = {}
    for p in lesson.presets():
        name = p["name"]
        data["blocks"][name] = {"": lesson.block(name)}
        if data["blocks"][name][""]["norm"] != "none":
            for place in PLACEMENTS:
                data["blocks"][name][place] = lesson.block(name, place)
    data["anatomy"] = {n: compute.anatomy(AnatomyRequest(config=n)) for n in ANATOMY}
    data["anatomy_configs"] = {"presets": ["course"], "configs": ["lesson-anchor"]}
    data["evolution"] = compute.evolution()
    runs = Runs(runs_dir)
    data["experiments"] = runs.summary()
    data["exports"] = {}
    for item in data["experiments"]:
        if item["has_data"]:
            data["exports"][item["name"]] = runs.export(item["name"])
    data["composite"] = compute.composite(CompositeRequest())
    data["frontier"] = runs.frontier()  # without frontier.json: how to run the experiment
    data["realmodel"] = realmodel.static_results(Path(runs_dir), progress)
    return _round(data)


def _inline(html: str, data: dict) -> str:
    def css(m: re.Match) -> str:
        return "<style>\n" + (STATIC / m.group(1)).read_text(encoding="utf-8") + "\n</style>"

    def js(m: re.Match) -> str:
        code = (STATIC / m.group(1)).read_text(encoding="utf-8")
        return "<script>\n" + code.replace("</script", "<\\/script") + "\n</script>"

    html = re.sub(r'<link rel="icon"[^>]*>\n?', "", html)
    html = re.sub(r'<link rel="stylesheet" href="static/([^"]+)">', css, html)
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    payload = payload.replace("</", "<\\/").replace("<!--", "<\\!--")
    blob = f'<script type="application/json" id="depthlab-data">{payload}</script>\n'
    first = html.index('<script src="')
    html = html[:first] + blob + html[first:]
    html = re.sub(r'<script src="static/([^"]+)"></script>', js, html)
    # Nothing may be fetched: scripts and styles are inline, everything else is refused.
    csp = ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
           'script-src \'unsafe-inline\'; style-src \'unsafe-inline\'; img-src data:">')
    return html.replace('<meta charset="utf-8">', '<meta charset="utf-8">\n' + csp, 1)


def export_page(out_dir: str | Path, *, runs_dir: Path = Path("runs"), grid: str = "standard",
                progress: bool = False) -> Path:
    """Write out_dir/index.html and return its path."""
    if grid not in GRIDS:
        raise ValueError(f"grid must be one of {', '.join(GRIDS)}")
    with writable_dir(out_dir, "DIR") as folder:  # checked before minutes of computing
        data = page_data(Path(runs_dir), grid, progress)
        html = _inline((STATIC / "index.html").read_text(encoding="utf-8"), data)
        path = folder / "index.html"
        atomic_write_text(path, html)
    return path
