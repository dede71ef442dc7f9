"""Aligned text tables for the CLI, each with a legend that says what every column holds.

Widths come from the formatted cells, so a column lines up whatever the values are
(a 12-character toggle label, a 17-digit parameter count, a negative cosine).
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection, Iterable, Sequence

INDENT = "  "
WIDTH = 100


def table(columns: Sequence[str], rows: Iterable[Sequence[object]], *,
          left: Collection[int] = (), indent: str = INDENT) -> list[str]:
    """The header and one line per row; cells are str()-ed, columns in `left` are
    left-aligned (text), the others right-aligned (numbers)."""
    cells = [[str(c) for c in row] for row in rows]
    for row in cells:
        if len(row) != len(columns):
            raise ValueError(f"row {row} has {len(row)} cells for {len(columns)} columns")
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(columns)]

    def line(items: Sequence[str]) -> str:
        return indent + "  ".join(s.ljust(w) if i in left else s.rjust(w)
                                  for i, (s, w) in enumerate(zip(items, widths, strict=True)))

    return [line(columns).rstrip()] + [line(r).rstrip() for r in cells]


def legend(*columns: tuple[str, str], indent: str = INDENT) -> list[str]:
    """'columns: a = what a is; b = ...', wrapped to WIDTH characters."""
    text = "columns: " + "; ".join(f"{name} = {meaning}" for name, meaning in columns)
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")


def print_lines(lines: Iterable[str]) -> None:
    print("\n".join(lines))
