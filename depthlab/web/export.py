"""`depthlab export-page DIR`: one self-contained HTML file that opens from disk.

The page's own scripts and styles are inlined, and its data are embedded as JSON: every
registered page section's answers to the requests it names for a static copy
(depthlab.web.sections: the simulator on a grid of slider positions, GRIDS; the sweeps
over g; the formula's exact arithmetic on a grid of N and a, PATHS_GRID; growth,
composite gain, block diagrams, anatomy, evolution table), stored as
`sections[name][request_key(request)]`; every experiment's export.json; and the
real-model probes of the shipped prompts on one run (depthlab.web.realmodel.static_results).
The same JavaScript reads that data instead of calling the API (static/js/api.js,
`embedded`), with both languages' text tables (depthlab.locales). Floats are rounded to
4 significant digits; exact values travel as the server's text.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from depthlab import __version__
from depthlab.atomic import atomic_write_text
from depthlab.locales import LANGS, table
from depthlab.outdir import writable_dir
from depthlab.presets import PRESETS
from depthlab.progress import Progress
from depthlab.web import compute, lesson, realmodel, sections
from depthlab.web.runs import Runs
from depthlab.web.sections import Section, request_key

STATIC = Path(__file__).parent / "static"
GRIDS = sections.GRIDS  # the slider positions a static copy holds, per --grid
PATHS_GRID = sections.PATHS_GRID


# Values the page only draws, at the 3 digits it shows: a simulator row's trail (one
# token's first writes, 30 numbers in every row of the grid) is the one today.
THREE_DIGITS = frozenset({"trail"})


def _round(obj, digits: int = 4):
    """4 significant digits for every float (keeps the file small; the page shows 3),
    3 under a key of THREE_DIGITS."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _round(v, 3 if k in THREE_DIGITS else digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_round(v, digits) for v in obj]
    return obj


def _snap_grid(requests: list) -> dict[str, list]:
    """Each numeric field's values over a section's static requests: the page moves a
    request onto them before it looks the answer up (api.js `snap`)."""
    values: dict[str, set] = {}
    for req in requests:
        for name, v in req.model_dump().items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                values.setdefault(name, set()).add(v)
    return {name: sorted(vs) for name, vs in values.items()}


def section_answers(section: Section, grid: str = "standard") -> tuple[dict, dict]:
    """A section's static answers keyed by `request_key`, and its snap grid."""
    requests = list(section.static(grid)) if section.static else []
    fn = compute.adapter(section)
    return {request_key(r): fn(r) for r in requests}, _snap_grid(requests)


def share(answers: dict[str, dict]) -> tuple[dict[str, dict], list]:
    """Store once what many answers repeat: an answer's top-level value (an object or an
    array) that occurs in more than one answer becomes {"$shared": i}, i its place in the
    returned list (the simulator's naive row is the same for every switch). api.js
    `unshare` puts them back."""
    def text(v) -> str:
        return json.dumps(v, sort_keys=True, separators=(",", ":"))

    counts: Counter = Counter(text(v) for per in answers.values() for a in per.values()
                              if isinstance(a, dict) for v in a.values() if isinstance(v, (dict, list)))
    shared: list = []
    index: dict[str, int] = {}

    def ref(v):
        if not isinstance(v, (dict, list)) or counts[t := text(v)] < 2:
            return v
        if t not in index:
            index[t] = len(shared)
            shared.append(v)
        return {"$shared": index[t]}

    out = {name: {k: ({f: ref(v) for f, v in a.items()} if isinstance(a, dict) else a)
                  for k, a in per.items()} for name, per in answers.items()}
    return out, shared


def static_sections(grid: str = "standard", progress: bool = False) -> tuple[list[dict], dict, list]:
    """Every registered section's listing (with its snap grid), its answers (rounded,
    repeats shared) and the shared values."""
    listing = sections.listing()
    answers: dict[str, dict] = {}
    bar = Progress(len(sections.SECTIONS), desc="export-page: precomputing the page's sections",
                   unit="section", enabled=progress, each_item=True)
    for i, (entry, section) in enumerate(zip(listing, sections.SECTIONS, strict=True)):
        answers[section.name], entry["grid"] = section_answers(section, grid)
        bar.report(i + 1, section=f"{section.name} done")
    bar.close()
    shared_answers, shared = share(_round(answers))
    return listing, shared_answers, shared


def page_data(runs_dir: Path, grid: str = "standard", progress: bool = False) -> dict:
    g = GRIDS[grid]
    listing, answers, shared = static_sections(grid, progress)
    data = {"meta": {"version": __version__, "mode": "static",
                     "exported_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "grid": {"n": list(g["n"]), "g": list(g["g"]), "g_step": g["g_step"]},
                     "paths_grid": {"n": list(PATHS_GRID["n"]), "a": [float(a) for a in PATHS_GRID["a"]]},
                     **lesson.page_facts(), "sections": listing, "page": sections.page_order()},
            "locales": {lang: table(lang) for lang in LANGS},
            "sections": answers, "shared": shared}
    # which residuals' x0-mixing rows this copy holds (the page disables the switch elsewhere)
    data["meta"]["simulator"] = {**data["meta"]["simulator"], "x0_static": list(sections.STATIC_X0_MIX),
                                 "mixer_static": list(sections.STATIC_MIXERS)}
    data["anatomy_configs"] = {"presets": [n for n in sections.ANATOMY if n in PRESETS],
                               "configs": [n for n in sections.ANATOMY if n not in PRESETS]}
    runs = Runs(runs_dir)
    data["experiments"] = runs.summary()
    data["exports"] = {}
    for item in data["experiments"]:
        if item["has_data"]:
            data["exports"][item["name"]] = runs.export(item["name"])
    data["frontier"] = runs.frontier()  # without frontier.json: how to run the experiment
    data["speedrun"] = runs.speedrun()  # without its export.json: how to run the experiment
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
        html = _inline(sections.page_html(), data)
        path = folder / "index.html"
        atomic_write_text(path, html)
    return path
