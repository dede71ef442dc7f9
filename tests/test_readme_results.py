"""docs/results.md's results section and the README's summary of it are what
scripts/update_readme_results.py writes from the exports committed in docs/results/: no
number in either is typed by hand."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location(
        "update_readme_results", ROOT / "scripts" / "update_readme_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def between(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end) + len(end)]


def test_results_section_is_rendered_from_the_committed_exports():
    script = load_script()
    doc = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert between(doc, script.START, script.END) == script.section(script.committed_exports())


def test_readme_summary_is_rendered_from_the_committed_exports():
    script = load_script()
    exports = script.committed_exports()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    said = between(readme, script.SUMMARY_START, script.SUMMARY_END)
    assert said == script.summary(exports)
    for name, export in exports.items():  # each headline is its experiment's first conclusion
        assert f"[{name}](docs/results.md#{name})" in said
        if export is not None:
            assert export["conclusions"][0]["en"] in said


def test_every_chart_the_section_and_summary_show_is_committed():
    for page, base in (("docs/results.md", ROOT / "docs"), ("README.md", ROOT)):
        text = (ROOT / page).read_text(encoding="utf-8")
        shown = re.findall(r"\]\(((?:docs/)?results/[^)]+\.png)\)", text)
        assert shown, f"{page} shows no chart"
        for path in shown:
            assert (base / path).is_file(), (page, path)


def test_an_export_of_another_budget_is_not_shown_as_standard(tmp_path, monkeypatch):
    script = load_script()
    export = {"experiment": "residual", "question": {"en": "q", "zh": "q"}, "budget": "quick",
              "charts": [], "table": {}, "conclusions": []}
    (tmp_path / "residual.export.json").write_text(__import__("json").dumps(export))
    monkeypatch.setattr(script, "RESULTS", tmp_path)
    exports = script.committed_exports()
    assert exports["residual"] is None
    assert "Not run at `standard` yet: `depthlab experiment residual" in script.section(exports)


def test_rule_sentences_of_the_committed_exports_are_their_per_seed_rendering():
    script = load_script()
    exports = {n: e for n, e in script.committed_exports().items() if e and "per_seed" in e}
    assert {"residual", "norm-placement"} <= set(exports)
    for name, export in exports.items():
        assert script.reworded(export) == export["conclusions"], name
