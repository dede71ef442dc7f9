"""Write the README's "Results" section from exported experiments.

    depthlab experiment NAME --budget standard --out runs/standard   (each experiment)
    python scripts/update_readme_results.py runs/standard

Copies one chart and the export.json of each experiment to docs/results/ and replaces the text between
the results markers in README.md with each experiment's table and conclusions,
so every number in that section comes from an export.json.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from depthlab.experiments import EXPERIMENTS
from depthlab.experiments.report import summary_markdown

START, END = "<!-- results:start -->", "<!-- results:end -->"
ROOT = Path(__file__).resolve().parents[1]


def section(runs: Path) -> str:
    out = [START, ""]
    images = ROOT / "docs" / "results"
    images.mkdir(parents=True, exist_ok=True)
    for name in EXPERIMENTS:
        path = runs / name / "export.json"
        if not path.exists():
            out += [f"### {name}", "", f"Not exported yet: `depthlab experiment {name} "
                    "--budget standard --out runs/standard`.", ""]
            continue
        export = json.loads(path.read_text(encoding="utf-8"))
        chart = export["charts"][0]["id"]
        shutil.copyfile(runs / name / f"{name}-{chart}.png", images / f"{name}-{chart}.png")
        shutil.copyfile(path, images / f"{name}.export.json")  # the numbers behind the text
        body = summary_markdown(export).splitlines()
        body = ["#### " + line[3:] if line.startswith("## ") else line
                for line in body if not line.startswith("![")]
        body[0] = f"### {name}"
        out += body + [f"![{export['charts'][0]['title']['en']}](docs/results/{name}-{chart}.png)",
                       ""]
    out.append(END)
    return "\n".join(out)


def main() -> int:
    runs = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/standard")
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    if START not in text or END not in text:
        print(f"README.md has no {START} ... {END} markers", file=sys.stderr)
        return 2
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + section(runs) + tail, encoding="utf-8")
    print(f"README.md results section rewritten from {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
