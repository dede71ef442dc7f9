"""Write docs/results.md's results section and the README's summary of it from exported
experiments.

    depthlab experiment NAME --budget standard --out runs/standard   (each experiment)
    python scripts/update_readme_results.py runs/standard

Copies each experiment's export.json and its charts to docs/results/, replaces the text
between the results markers in docs/results.md with each experiment's table and
conclusions, and the text between the summary markers in README.md with each
experiment's first conclusion and the first experiment's headline chart, so every number
in either comes from an export.json. Before that, the rule sentences of each copy that
carries per-seed final losses (`per_seed`) are rendered again from them by the
experiment's `reword`, so a change of wording or rule reaches the docs without training
again. `tests/test_readme_results.py` renders the section, the summary and those
sentences again from the copies in docs/results/ and checks that docs/results.md, the
README and the copies say exactly that.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from depthlab.experiments import EXPERIMENTS, get_experiment
from depthlab.experiments.report import summary_markdown
from depthlab.rundir import atomic_write_text

START, END = "<!-- results:start -->", "<!-- results:end -->"  # in docs/results.md
SUMMARY_START, SUMMARY_END = "<!-- results-summary:start -->", "<!-- results-summary:end -->"
EXPLAINING_CHARTS = {"collapse", "first_token"}  # why: the collapse, the sink per layer
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
RESULTS_DOC = ROOT / "docs" / "results.md"  # the whole section; its charts are results/NAME-ID.png
README = ROOT / "README.md"  # the summary; its chart is docs/results/NAME-ID.png


def readme_charts(charts: list[dict]) -> list[dict]:
    """The headline chart of an experiment, plus the one that shows why where there is
    one (the collapse: gradients per block and the top write over steps; the
    first-token share per layer beside SmolLM2)."""
    return [charts[0]] + [c for c in charts[1:] if c["id"] in EXPLAINING_CHARTS]


def experiment_text(name: str, export: dict) -> list[str]:
    """One experiment's part of the section: its summary with the headings moved one
    level down and its charts pointing into docs/results/ (from docs/results.md)."""
    body = summary_markdown(export).splitlines()
    body = ["#### " + line[3:] if line.startswith("## ") else line
            for line in body if not line.startswith("![")]
    body[0] = f"### {name}"
    for chart in readme_charts(export["charts"]):
        body.append(f"![{chart['title']['en']}](results/{name}-{chart['id']}.png)")
    return body + [""]


def section(exports: dict[str, dict | None]) -> str:
    """The whole section; an experiment without an export says how to make one."""
    out = [START, ""]
    for name, export in exports.items():
        if export is None:
            out += [f"### {name}", "", f"Not run at `standard` yet: `depthlab experiment {name} "
                    "--budget standard --out runs/standard`.", ""]
        else:
            out += experiment_text(name, export)
    out.append(END)
    return "\n".join(out)


def committed_exports() -> dict[str, dict | None]:
    """The exports the README was written from, as copied into docs/results/; an
    experiment whose copy is of another budget counts as not run at standard."""
    out: dict[str, dict | None] = {}
    for name in EXPERIMENTS:
        path = RESULTS / f"{name}.export.json"
        export = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
        out[name] = export if export and export.get("budget") == "standard" else None
    return out


def copy_exports(runs: Path) -> None:
    """Each standard export under RUNS and the charts the section shows, into docs/results/."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in EXPERIMENTS:
        path = runs / name / "export.json"
        if not path.exists():
            continue
        export = json.loads(path.read_text(encoding="utf-8"))
        if export.get("budget") != "standard":
            continue
        shutil.copyfile(path, RESULTS / f"{name}.export.json")
        for chart in readme_charts(export["charts"]):
            png = f"{name}-{chart['id']}.png"
            shutil.copyfile(runs / name / png, RESULTS / png)


def reworded(export: dict) -> list[dict]:
    """The export's conclusions, the rule sentences rendered again from its per-seed
    losses where it has them and its experiment knows how."""
    reword = get_experiment(export["experiment"]).reword
    return reword(export) if reword and "per_seed" in export else export["conclusions"]


def reword_committed() -> None:
    for name in EXPERIMENTS:
        path = RESULTS / f"{name}.export.json"
        if path.exists():
            export = json.loads(path.read_text(encoding="utf-8"))
            if reworded(export) != export["conclusions"]:
                export["conclusions"] = reworded(export)
                atomic_write_text(path, json.dumps(export, ensure_ascii=False, allow_nan=False,
                                                   indent=1))


def summary(exports: dict[str, dict | None]) -> str:
    """The README's summary: each experiment's first conclusion, linked to its part of
    docs/results.md, and the first exported experiment's headline chart."""
    out = [SUMMARY_START, ""]
    for name, export in exports.items():
        link = f"[{name}](docs/results.md#{name})"
        if export is None:
            out.append(f"- {link}: not run at `standard` yet.")
        else:
            out.append(f"- {link}: {export['conclusions'][0]['en']}")
    shown = next(((n, e) for n, e in exports.items() if e is not None), None)
    if shown is not None:
        name, export = shown
        chart = readme_charts(export["charts"])[0]
        out += ["", f"![{chart['title']['en']}](docs/results/{name}-{chart['id']}.png)"]
    out += ["", SUMMARY_END]
    return "\n".join(out)


def replaced(text: str, start: str, end: str, new: str) -> str:
    """text with everything from `start` to `end` (both included) replaced by `new`."""
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + new + tail


def main() -> int:
    runs = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/standard")
    doc, readme = RESULTS_DOC.read_text(encoding="utf-8"), README.read_text(encoding="utf-8")
    for path, text, (start, end) in ((RESULTS_DOC, doc, (START, END)),
                                     (README, readme, (SUMMARY_START, SUMMARY_END))):
        if start not in text or end not in text:
            print(f"{path.relative_to(ROOT)} has no {start} ... {end} markers", file=sys.stderr)
            return 2
    copy_exports(runs)
    reword_committed()
    exports = committed_exports()
    atomic_write_text(RESULTS_DOC, replaced(doc, START, END, section(exports)))
    atomic_write_text(README, replaced(readme, SUMMARY_START, SUMMARY_END, summary(exports)))
    print(f"docs/results.md and the README's summary rewritten from {runs} "
          "(copies in docs/results/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
