"""Experiment sentences in every language, from the templates of
depthlab/locales/<lang>/experiments.json.

`phrase` is `depthlab.locales.texts` for sentences whose fields are themselves
words (a name, a clause, a list): a value given as {"en": ..., "zh": ...} fills each
language's template with its own language's words; plain values (numbers already
formatted) fill every language alike.
"""

from __future__ import annotations

from depthlab.locales import LANGS, text

Text = dict[str, str]


def phrase(key: str, **values: object) -> Text:
    """The template `experiments.<key>` in every language, its fields filled."""
    return {lang: text(f"experiments.{key}", lang, **{
        name: value[lang] if isinstance(value, dict) else value for name, value in values.items()})
        for lang in LANGS}


def joined(items: list[Text], sep: str = "list") -> Text:
    """Words joined with each language's separator (`experiments.sep.<sep>`)."""
    seps = phrase(f"sep.{sep}")
    return {lang: seps[lang].join(item[lang] for item in items) for lang in LANGS}


def same(words: str) -> Text:
    """Words that read the same in every language (names, numbers)."""
    return dict.fromkeys(LANGS, words)
