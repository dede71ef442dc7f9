"""Numbers as a person types them, on a Chinese keyboard as well as an English one.

A Chinese input method gives full-width forms: "３，４", "－０．５", an ideographic
comma "3、4" or space. `normalize` folds the width forms with Unicode NFKC (the
full-width digits, comma, period, minus, semicolon, the small forms and the wide
spaces) and maps the minus signs NFKC keeps (U+2212 and the dashes a word processor
makes of "-"); then `parse_numbers` reads numbers separated by commas, semicolons or
spaces. Only width forms are folded: NFKC of the whole text would read "3²" as 32 and
"①" as 1, which are refused instead.

The page's vector box, `POST /api/norms` with `x` given as text, and `depthlab probe
norms` all read through here. The page's copy (`DL.parseNumbers` in
web/static/js/api.js) follows the same rules, and tests/test_numtext.py runs both on
the same inputs.
"""

from __future__ import annotations

import re
import unicodedata

# Minus signs NFKC leaves alone: the minus sign, figure dash, en dash, small/full-width
# hyphen-minus are folded by NFKC already (U+FE63, U+FF0D).
_MINUS = str.maketrans({"\u2212": "-", "\u2012": "-", "\u2013": "-"})
# after NFKC: ， -> ,  ； -> ;  every Unicode space (the ideographic one too) -> " "
SEPARATORS = re.compile(r"[\t\n\v\f\r ,;、\u0085\u2028\u2029]+")
NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # ASCII digits only


class NumberTextError(ValueError):
    """A piece of the text that is not a number; `piece` is it, as typed after folding."""

    def __init__(self, piece: str) -> None:
        super().__init__(f"{piece!r} is not a number")
        self.piece = piece


# The width forms: no-break and wide spaces, the ideographic space, the small forms
# (﹐ ﹒ ﹣ ...) and the full-width forms of ASCII (０-９ ， ． － ...).
_WIDTH_FORMS = re.compile("[\u00a0\u2000-\u200a\u202f\u205f\u3000\ufe50-\ufe6b\uff01-\uff5e]")


def normalize(text: str) -> str:
    """`text` with full-width digits, signs and separators folded to ASCII."""
    return _WIDTH_FORMS.sub(lambda m: unicodedata.normalize("NFKC", m[0]), text).translate(_MINUS)


def parse_number(text: str) -> float:
    """One number ("３．５", "−2", "1e-3"); NumberTextError if it is not one."""
    piece = normalize(text).strip()
    if not NUMBER.fullmatch(piece):
        raise NumberTextError(piece)
    return float(piece)


def parse_numbers(text: str) -> list[float]:
    """The numbers in "3, 4", "3，4", "３，４", "3、4" or "3 4" (empty text: [])."""
    return [parse_number(piece) for piece in SEPARATORS.split(normalize(text)) if piece]
