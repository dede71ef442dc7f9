"""Write every list of residuals, norms, placements, FFNs, mixers, presets, shortcuts and page
sections in README.md and docs/ from the tables the code reads.

    python scripts/docs_lists.py          # rewrite the text between the markers
    python scripts/docs_lists.py --check  # exit 1 and name each page that is out of date

A generated list stands between `<!-- list:NAME -->` and `<!-- /list:NAME -->`, inline in
a sentence or a table cell, or as a whole table on the lines between. tests/test_docs.py
runs the check, so a variant, preset or section added to its table without running this
script fails the suite, and no page can name 4 of 9 residuals again.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKED = re.compile(r"(<!-- list:([\w-]+) -->)(.*?)(<!-- /list:\2 -->)", re.S)


def keys(names) -> str:
    return ", ".join(f"`{k}`" for k in names)


def keys_of(registry: str) -> Callable[[], str]:
    """The inline list of one registry's keys (a table of depthlab.variants), read when called."""
    def listed() -> str:
        from depthlab import variants

        return keys(getattr(variants, registry))
    return listed


def cell(text: str) -> str:
    """Text as one Markdown table cell: its bars escaped, its lines joined."""
    return " ".join(text.replace("|", "\\|").split())


def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def residuals() -> str:
    """Each residual: its write, its init, what it needs of the other switches, its source."""
    from depthlab.config import MAX_STREAMS
    from depthlab.variants import RESIDUAL_SPECS

    def needs(s) -> str:
        parts = [f"`placement={'|'.join(s.placements)}`"] if s.placements else []
        if s.norms:
            parts.append(f"`norm={'|'.join(s.norms)}`" + (", `final_norm=false`" if s.needs_no_norm else ""))
        if s.ffns:
            parts.append(f"`ffn={'|'.join(s.ffns)}`")
        if s.widens_copies:
            parts.append(f"`streams` 1-{MAX_STREAMS}")
        return ", ".join(parts) or "-"

    def write(s) -> str:  # the simulator's marks (depthlab.variants) in the docs' words
        return s.formula.replace("⟦", "LN(").replace("⟧", ")").replace("{n}", "n")

    return table(("residual", "the write", "init", "needs", "from"),
                 [(f"`{k}`", f"`{write(s)}`", s.init, needs(s), s.source or "-")
                  for k, s in RESIDUAL_SPECS.items()])


def norms() -> str:
    from depthlab.variants import NORM_SPECS

    return table(("norm", "name", "formula", "init", "from"),
                 [(f"`{k}`", s.label or "-", f"`{s.formula}`", s.init, s.source or "-")
                  for k, s in NORM_SPECS.items()])


def shortcuts() -> str:
    from depthlab.variants import SHORTCUT_SPECS

    return table(("switch", "what it computes", "init", "from", "flag"),
                 [(f"`{k}`", f"`{s.formula}`", s.init, s.source,
                   f"`--set model.{k}={'15' if s.off is None else 'true'}`")
                  for k, s in SHORTCUT_SPECS.items()])


def presets() -> str:
    """Each preset and the first paragraph of its docstring."""
    from depthlab.presets import PRESETS

    def first_paragraph(fn) -> str:
        return " ".join(inspect.getdoc(fn).split("\n\n")[0].split())

    return table(("preset", "what it is"), [(f"`{k}`", first_paragraph(f)) for k, f in PRESETS.items()])


def field_bounds(name: str, prop: dict) -> str:
    """One request field as the API table gives it: its name, what it takes, its default."""
    def num(x) -> str:
        if isinstance(x, bool):
            return "true" if x else "false"
        return f"{x:g}" if isinstance(x, float) else str(x)

    if "enum" in prop:
        took = "|".join(str(v) for v in prop["enum"])
    elif prop.get("type") in ("integer", "number"):
        low = (f"({num(prop['exclusiveMinimum'])}" if "exclusiveMinimum" in prop
               else num(prop.get("minimum", "")))
        high = num(prop.get("maximum", ""))
        took = f"{low}, {high}]" if low.startswith("(") else f"{low}..{high}"
    elif prop.get("type") == "array":
        items = prop.get("items", {})
        took = (f"{prop.get('minItems', 0)}..{prop.get('maxItems', '')} numbers, each within "
                f"±{num(items.get('maximum', ''))}")
    elif prop.get("type") == "boolean":
        took = "true|false"
    else:
        took = prop.get("description", "text")
    default = f" ({num(prop['default'])})" if prop.get("default") not in (None, "") else ""
    return f"`{name}` {took}{default}"


def sections() -> str:
    """The page sections with server data: their routes, their requests' bounds (from the
    request models' JSON schema) and what each answers."""
    from depthlab.web.sections import SECTIONS

    def bounds(s) -> str:
        props = s.request.model_json_schema().get("properties", {})
        return ", ".join(field_bounds(n, p) for n, p in props.items()) or "—"

    return table(("method", "path", "input (bounds, default)", "answers"),
                 [(s.method, f"`{s.path}`", bounds(s), s.summary) for s in SECTIONS])


LISTS: dict[str, Callable[[], str]] = {
    "residual-keys": keys_of("RESIDUAL_SPECS"), "norm-keys": keys_of("NORM_SPECS"),
    "placement-keys": keys_of("PLACEMENTS"), "ffn-keys": keys_of("FFNS"),
    "mixer-keys": keys_of("MIXER_SPECS"), "shortcut-keys": keys_of("SHORTCUT_SPECS"),
    "residuals": residuals, "norms": norms, "shortcuts": shortcuts, "presets": presets,
    "sections": sections,
}


def generated(text: str, where: str = "") -> str:
    """`text` with every marked list written anew; an unknown list name is an error."""
    def fill(m: re.Match) -> str:
        name = m.group(2)
        if name not in LISTS:
            raise SystemExit(f"{where}: unknown list {name!r}; known: {', '.join(LISTS)}")
        body = LISTS[name]()
        inner = f"\n{body}\n" if "\n" in body else body
        return f"{m.group(1)}{inner}{m.group(4)}"

    return MARKED.sub(fill, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args()
    stale = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        wanted = generated(text, str(page.relative_to(ROOT)))
        if wanted != text:
            stale.append(str(page.relative_to(ROOT)))
            if not args.check:
                page.write_text(wanted, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run python {sys.argv[0]}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
