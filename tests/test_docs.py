"""The README and the docs/ pages: every relative link reaches a file (and, for a page, the
heading it names), the README stays a front page whose two commands are the ones the
scripts and CI run, and the real-model figures are what their script renders from the
numbers committed beside them."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def links(text: str) -> list[str]:
    """The link and image targets of a Markdown text, outside fenced code."""
    return LINK.findall(FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_and_links_read_markdown_as_github_does():
    assert slug("The page's server") == "the-pages-server"
    assert slug("`export.json`") == "exportjson"
    assert slug("What the experiment found (all arms)") == "what-the-experiment-found-all-arms"
    assert anchors("# A\n## A\n```\n# B\n```\n") == {"a", "a-1"}
    assert links("[x](a.md#b) ![y](img/c.png)\n```\n[z](no.md)\n```\n[w](\nhttp://e)") == [
        "a.md#b", "img/c.png"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    text = page.read_text(encoding="utf-8")
    for target in links(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        assert where.is_file(), f"{page.name}: {target} (no such file)"
        if anchor and where.suffix == ".md":
            assert anchor in anchors(where.read_text(encoding="utf-8")), (
                f"{page.name}: {target} (no such heading)")


def test_readme_is_a_front_page_with_the_two_commands_ci_and_the_scripts_run():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    two = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```bash\n(.*?)\n```", two, re.S) == ["bash scripts/lab.sh",
                                                              "bash scripts/test.sh"]
    assert "bash scripts/test.sh --quick" in two
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[-1] == "bash scripts/test.sh"
    lab = (ROOT / "scripts" / "lab.sh").read_text(encoding="utf-8")
    assert "bash scripts/setup.sh" in lab and "depthlab lab" in lab
    test = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert "bash scripts/setup.sh --dev" in test and '"not slow and not browser"' in test


def test_real_model_figures_are_rendered_from_the_committed_numbers():
    spec = importlib.util.spec_from_file_location(
        "realmodel_figures", ROOT / "scripts" / "realmodel_figures.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    numbers = json.loads((ROOT / "docs" / "results" / "realmodel-smollm2.json").read_text(
        encoding="utf-8"))
    page = (ROOT / "docs" / "real-models.md").read_text(encoding="utf-8")
    said = page[page.index(script.START):page.index(script.END) + len(script.END)]
    assert said == script.section(numbers)


TABLE_ROW = re.compile(r"^\|.*\|\s*$", re.M)
CELL_LIMIT = 300  # characters: a longer cell is prose that belongs under the table


def table_cells(text: str) -> list[str]:
    """The cells of every Markdown table row outside fenced code (an escaped \\| stays in its cell)."""
    cells = []
    for row in TABLE_ROW.findall(FENCE.sub("", text)):
        cells += [c.strip() for c in re.split(r"(?<!\\)\|", row.strip()[1:-1])]
    return cells


def test_table_cells_splits_rows_and_keeps_escaped_bars():
    assert table_cells("| a | b \\| c |\n| --- | --- |\ntext | not a row\n```\n| x |\n```\n") == [
        "a", "b \\| c", "---", "---"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_table_cell_reads_as_a_paragraph(page):
    long = [c[:60] + "..." for c in table_cells(page.read_text(encoding="utf-8")) if len(c) > CELL_LIMIT]
    assert not long, f"{page.name}: cells over {CELL_LIMIT} characters: {long}"


def _docs_lists():
    spec = importlib.util.spec_from_file_location("docs_lists", ROOT / "scripts" / "docs_lists.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_list_of_the_registries_is_generated_from_them(page):
    """Each marked list (residuals, norms, placements, FFNs, presets, shortcuts, sections)
    is what scripts/docs_lists.py writes from the tables today."""
    text = page.read_text(encoding="utf-8")
    assert _docs_lists().generated(text, page.name) == text, "run python scripts/docs_lists.py"


def test_a_variant_added_without_regenerating_the_docs_is_caught(monkeypatch):
    from depthlab import variants

    script = _docs_lists()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert script.generated(readme) == readme
    monkeypatch.setitem(variants.RESIDUAL_SPECS, "_test_half",
                        variants.ResidualSpec("_test_half", "x ← x + F(x) / 2", "nothing to initialise"))
    assert "`_test_half`" in script.generated(readme) != readme
    # every registry the docs list has its marker in the README or a docs page
    used = {m.group(2) for p in PAGES for m in script.MARKED.finditer(p.read_text(encoding="utf-8"))}
    assert used == set(script.LISTS)


def test_the_residual_modules_docstring_names_every_residual():
    from depthlab.model import residual
    from depthlab.variants import RESIDUAL_SPECS

    entries = residual.__doc__.split("Entries:", 1)[1]
    assert [k for k in RESIDUAL_SPECS if not re.search(rf"^\s+{k}\b", entries, re.M)] == []
