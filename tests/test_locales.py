"""The translation table: one per language, the same keys in every language."""

import re

import pytest

from depthlab.errors import UserError
from depthlab.locales import LANGS, table, text, texts

FIELD = re.compile(r"\{(\w+)[^}]*\}")


def test_every_language_has_the_same_keys():
    keys = {lang: set(table(lang)) for lang in LANGS}
    assert keys["en"] and all(k == keys["en"] for k in keys.values())


@pytest.mark.parametrize("lang", LANGS[1:])
def test_every_template_has_the_same_fields_in_every_language(lang):
    for key, template in table("en").items():
        assert set(FIELD.findall(table(lang)[key])) == set(FIELD.findall(template)), key


def test_text_fills_the_template_and_names_a_bad_language():
    assert texts("lang.name") == {"en": "English", "zh": "中文"}
    assert text("lang.name", "zh") == "中文"
    with pytest.raises(UserError, match="lang must be one of en, zh"):
        text("lang.name", "fr")


def test_marked_keeps_the_code_fields_apart_from_prose_with_apostrophes():
    """The attention reading says "each layer's attention": the apostrophe stays prose, and
    the token (here one that holds quotes itself) is one part of its own in every language."""
    from depthlab.locales import joined, marked

    token = repr("'s \"x\"")
    got = marked("rm.read.attention", {"token": token}, share="40%", uniform="17%")
    for lang in LANGS:
        assert got[lang] == text("rm.read.attention", lang, token=token, share="40%", uniform="17%")
        assert "".join(got["parts"][lang]) == got[lang]
        assert got["parts"][lang][1::2] == [token]
    assert "layer's attention" in got["parts"]["en"][0]
    # a plain sentence joined after it keeps the token as the one code part
    both = joined(got, texts("lang.name"), {"en": " ", "zh": ""})
    assert both["parts"]["en"][1::2] == [token] and both["en"] == got["en"] + " English"
    assert both["zh"] == got["zh"] + "中文"
