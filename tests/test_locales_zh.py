"""The Chinese table reads as Chinese: one term per concept, full-width punctuation.

Two checks over every zh template (all of depthlab/locales/zh/*.json):

* the glossary (depthlab/locales/glossary.json): for each concept, none of its forbidden
  variants (a bare English word, a competing translation) occurs in zh prose, and a zh
  string whose English side names the concept uses the glossary's term;
* punctuation: ASCII , . : ; ( ) ! ? occur only inside what is not prose (the exceptions
  below); everywhere else Chinese uses ，。：；（）！？.

What is not prose, and so may keep ASCII punctuation (each is cut out before the check):
  {name}                 a placeholder (filled with numbers or English data by the caller)
  `code`                 code in backticks
  http(s)://...          a URL
  F(x), N(0, g²/fan_in), RMSNorm(α·x + F(x)), √(1 + {k})
                         a function applied to ASCII arguments: math
  ({i}, {j})             a coordinate pair of placeholders: math
  (1 + a), (H_T/T)       a parenthesis of ASCII with an operator inside: math
  2.5, 1,024, 1:2        a number with its separators
  frontier.json, o_proj  an identifier (dotted or snake_case)
  prompt：…              in a server error (err.*), the request field it names first: the
                         API's "field: message" keeps the field's own name
A parenthesis that holds any Chinese character is prose whatever else it holds, so
"(He 等 2016)" or "(nats/词元)" are caught; the separators of a number must have a
digit on both sides, so "3, 4" or "2." at a sentence's end are caught.
"""

import json
import re
from importlib import resources

import pytest

from depthlab.locales import table

CJK = "\u3000-\u303f\u3400-\u9fff\uff00-\uffef"  # CJK punctuation, ideographs, full-width forms
_ASCII_ARGS = r"(?:[^(){}" + CJK + r"]|\([^(){}" + CJK + r"]*\))*"  # one level of nesting
NOT_PROSE = re.compile("|".join([
    r"\{\w+[^}]*\}",
    r"`[^`]*`",
    r"https?://\S+",
    r"(?:[A-Za-z_][\w²]*|√)\(" + _ASCII_ARGS + r"\)",
    r"√\((?:[^(){}" + CJK + r"]|\{\w+\})*\)",
    r"\(\{\w+\}(?:, ?\{\w+\})+\)",
    r"\(" + _ASCII_ARGS + r"[+\-*/^=×·√<>]" + _ASCII_ARGS + r"\)",
    r"\d+(?:[.,:]\d+)+",
    r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+",
    r"\b\w*_\w*\b",
]))
PROSE_PUNCT = re.compile(r"[,.:;()!?]")
GLOSSARY = json.loads((resources.files("depthlab.locales") / "glossary.json").read_text("utf-8"))


FIELD_NAME = re.compile(r"^[a-z][\w.-]*(?=：)")  # "prompt：…", "x-depthlab-token：…"


def prose(template: str, key: str = "") -> str:
    """The template with everything that is not prose replaced by a space."""
    if key.startswith("err."):
        template = FIELD_NAME.sub(" ", template)
    return NOT_PROSE.sub(" ", template)


def ascii_punctuation(template: str, key: str = "") -> list[str]:
    """Each ASCII punctuation mark in the template's prose, with what surrounds it."""
    text = prose(template, key)
    return [text[max(0, m.start() - 6):m.end() + 6] for m in PROSE_PUNCT.finditer(text)]


def _term(word: str) -> re.Pattern:
    """A glossary word: a Latin word matches whole and in any case, Chinese as it is."""
    if re.fullmatch(r"[A-Za-z][A-Za-z -]*", word):
        return re.compile(r"(?<![A-Za-z])" + re.escape(word) + r"(?![A-Za-z])", re.IGNORECASE)
    return re.compile(re.escape(word))


def test_the_check_finds_ascii_punctuation_in_prose_and_not_in_math_or_code():
    for bad in ["残差连接:每一层", "叠起来,叠得越深", "会坏在哪里?", "（He 等 2016)", "验证损失(nats/词元)",
                "{L} 层,d_model {d}", "输入 3, 4", "到此为止.", "停!", "先读;再写",
                "Pre-LN({plain})", "(float64)"]:
        assert ascii_punctuation(bad), bad
    for good in ["x ← F(x)：上一个子层", "N(0, g²/fan_in)", "√(1 + {k}) = {e}", "第 ({i}, {j}) 项",
                 "(1 + a)^N", "首词元占比 / (H_T/T)", "2.5 倍，1,024 条", "frontier.json 里",
                 "`depthlab lab --out runs`", "hook_mixing 或 {name:.3g}", "https://example.org/a.b",
                 "RMSNorm(α·x + F(x))"]:
        assert not ascii_punctuation(good), good


def test_zh_prose_uses_full_width_punctuation():
    found = {k: marks for k, t in table("zh").items() if (marks := ascii_punctuation(t, k))}
    assert not found, found


def test_the_glossary_names_one_zh_term_per_concept_and_its_variants_are_not_its_term():
    terms = [entry["zh"] for entry in GLOSSARY.values()]
    assert len(terms) == len(set(terms))
    for concept, entry in GLOSSARY.items():
        assert entry["forbidden"] and set(entry) <= {"zh", "forbidden", "keys", "note"}, concept
        assert not any(_term(f).search(entry["zh"]) for f in entry["forbidden"]), concept


@pytest.mark.parametrize("concept", list(GLOSSARY))
def test_no_zh_string_uses_a_forbidden_variant(concept):
    patterns = [_term(f) for f in GLOSSARY[concept]["forbidden"]]
    found = {key: p.pattern for key, t in table("zh").items()
             for p in patterns if p.search(prose(t, key))}
    assert not found, f"{concept}: use {GLOSSARY[concept]['zh']!r}, not {found}"


def test_a_zh_string_whose_english_names_the_token_uses_the_glossary_term():
    en, zh = table("en"), table("zh")
    word = _term("token")
    other_sense = set(GLOSSARY["write token"]["keys"])  # the server's secret, said 凭据
    missing = [k for k, t in en.items() if word.search(prose(t, k)) and GLOSSARY["token"]["zh"] not in zh[k]
               and k not in other_sense]
    assert not missing, missing
    assert all(GLOSSARY["write token"]["zh"] in zh[k] for k in other_sense)
