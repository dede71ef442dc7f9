"""Every sentence the user reads, one table per language.

The table of a language is the union of the JSON files in `depthlab/locales/<lang>/`,
one file per area (page.json, experiments.json, anatomy.json, ...), each mapping a
dotted key to a template. The area files keep the tables small to read and to merge;
a key still lives in exactly one file, and every language has the same keys (both are
checked on load and in tests/test_locales.py).

Templates use `{name}` fields and are filled with numbers already formatted by the
caller; the page's `DL.t(key, values)` fills the same templates from the same files,
so the CLI, the experiment reports and the page say the same thing.

Chinese prose uses full-width punctuation and one term per concept: glossary.json
beside the language folders names the term (词元 for token, 残差流 for residual
stream, ...) and the variants it replaces; tests/test_locales_zh.py checks both.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from depthlab.errors import UserError

LANGS = ("en", "zh")


@lru_cache(maxsize=len(LANGS))  # one entry per language: a bad name raises, never cached
def table(lang: str) -> dict[str, str]:
    """key -> template for one language, merged from its area files."""
    if lang not in LANGS:
        raise UserError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    merged: dict[str, str] = {}
    folder = resources.files("depthlab.locales") / lang
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".json"):
            continue
        area = json.loads(entry.read_text(encoding="utf-8"))
        for key, template in area.items():
            if key in merged:
                raise ValueError(f"locales/{lang}/{entry.name}: key {key!r} is defined twice")
            merged[key] = template
    return merged


def text(key: str, lang: str = "en", **values: object) -> str:
    """The sentence `key` in `lang`, its `{name}` fields filled from `values`."""
    return table(lang)[key].format(**values)


def texts(key: str, **values: object) -> dict[str, str]:
    """The sentence in every language: {"en": ..., "zh": ...} (what export.json carries)."""
    return {lang: text(key, lang, **values) for lang in LANGS}
