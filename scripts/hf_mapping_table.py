"""Write docs/real-models.md's Hugging Face mapping table from depthlab/hf/mapping.py.

    python scripts/hf_mapping_table.py          # rewrite the text between the markers
    python scripts/hf_mapping_table.py --check  # exit 1 if the page is out of date

tests/test_hf_mapping.py runs the check, so the page cannot drift from the table
that import, export and anatomy read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from depthlab.hf.mapping_doc import markdown_table

START, END = "<!-- hf-mapping:start -->", "<!-- hf-mapping:end -->"
PAGE = Path(__file__).resolve().parents[1] / "docs" / "real-models.md"


def with_table(page: str) -> str:
    """The page's text with the generated table between the markers."""
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{markdown_table()}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args()
    text = PAGE.read_text(encoding="utf-8")
    wanted = with_table(text)
    if args.check:
        if wanted != text:
            print(f"{PAGE}: the mapping table is out of date; run {sys.argv[0]}")
            return 1
        return 0
    PAGE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
