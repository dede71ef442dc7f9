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
beside the language folders names the term (token kept in English, as the course
writes it; 残差流 for residual stream, ...) and the variants it replaces;
tests/test_locales_zh.py checks both.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from string import Formatter

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


def parts(key: str, lang: str, code: dict[str, object], **values: object) -> list[str]:
    """The sentence `key` in `lang` cut at its `code` fields (token text, quoted): even
    items are prose, odd items the code fields' values, so a reader can set the data
    apart without looking for quotes in the prose (an apostrophe is not a quote)."""
    out = [""]
    for prose, field, spec, conv in Formatter().parse(table(lang)[key]):
        out[-1] += prose
        if field is None:
            continue
        if field in code:
            out += [str(code[field]), ""]
        else:
            out[-1] += ("{" + field + ("!" + conv if conv else "") + ":" + spec + "}").format(**values)
    return out


def marked(key: str, code: dict[str, object], **values: object) -> dict[str, object]:
    """`texts` with the `code` fields also kept apart: {"en": str, "zh": str, "parts":
    {lang: parts(...)}}, where "".join(parts[lang]) is the sentence in `lang`."""
    cut = {lang: parts(key, lang, code, **values) for lang in LANGS}
    return {**{lang: "".join(p) for lang, p in cut.items()}, "parts": cut}


def joined(a: dict[str, object], b: dict[str, object], sep: dict[str, str]) -> dict[str, object]:
    """Two sentences (`texts` or `marked`) as one, `sep[lang]` between them, their parts kept."""
    cut = {lang: _cut(a, lang)[:-1] + [_cut(a, lang)[-1] + sep[lang] + _cut(b, lang)[0]]
           + _cut(b, lang)[1:] for lang in LANGS}
    return {**{lang: "".join(p) for lang, p in cut.items()}, "parts": cut}


def _cut(sentence: dict[str, object], lang: str) -> list[str]:
    """A sentence's parts in `lang`: a plain `texts` sentence is one piece of prose."""
    return list(sentence["parts"][lang]) if "parts" in sentence else [sentence[lang]]
