"""Exact numbers for the lesson's arithmetic: typed decimals read as fractions, and exact
values written for people.

A float sum of C(N, k) a^k cancels catastrophically for negative a (at N = 64, a = -2 it
gave -2.49e12 for (1 + a)^N = 1), and a count rounded to three digits is not a count. So
the arithmetic runs on Python integers and `fractions.Fraction`, and `text` writes the
result: an integer in full with thousands separators ("1,024": one convention for the
CLI and the page in both languages), a short finite decimal in full, anything longer as
the exact value correctly rounded to 12 significant digits (placed between 1e-4 and 1e12,
else with its exponent), marked "~" when the digits shown are not the whole value
("~0.00117901845777", "~1.23456789012e-40"); `sqrt_text` does the same for a square root
(the init scale 0.02/sqrt(2L)). Floats are made from the exact value only at the end
(`to_float`), for JSON and log charts. The page only changes the notation (DL.exact).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

from depthlab.errors import UserError
from depthlab.numtext import normalize

SIG_DIGITS = 12  # the significant digits of a value too long to write in full
POSITIONAL = (-4, 12)  # ... written without an exponent when 10^-4 <= |value| < 10^12
MAX_FULL_DIGITS = 20  # a finite decimal of at most this many significant digits ...
MAX_FULL_PLACES = 15  # ... and at most this many after the point is written in full
# Integers are written in full up to 1,000 digits (the page's largest, 11^64, has 67; only
# the CLI's wider range reaches further, and Python stops printing at 4,300 digits).
MAX_INTEGER_BITS = 3300
# A typed decimal: digits, one optional point, an optional exponent of at most 3 digits
# (a longer one would make the exact arithmetic astronomically large).
_DECIMAL = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d{1,3})?$")
MAX_TYPED_CHARS = 40


def parse_decimal(value: str | float | int | Fraction | Decimal, name: str = "value") -> Fraction:
    """The exact number a person typed: "-0.1" is -1/10, not the float nearest to it.
    A float is read by its shortest decimal form (repr), which is what JSON and the
    page's input carried; the unicode minus and full-width digits are accepted."""
    if isinstance(value, bool):
        raise UserError(f"{name} must be a number, got {value!r}")
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise UserError(f"{name} must be a finite number, got {value}")
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UserError(f"{name} must be a finite number, got {value!r}")
        return Fraction(repr(value))
    text = normalize(str(value)).strip()  # full-width digits and signs, the unicode minus
    if len(text) > MAX_TYPED_CHARS or not _DECIMAL.match(text):
        raise UserError(f"{name} must be a decimal number such as -0.1 or 2.5e-3 (exponent at most "
                        f"3 digits, at most {MAX_TYPED_CHARS} characters), got {str(value)!r}")
    return Fraction(text)


def to_float(q: Fraction) -> float | None:
    """The correctly rounded float of q, or None (JSON null) when it overflows a float."""
    try:
        return float(q)
    except OverflowError:
        return None


def _decimal_places(q: Fraction, most: int) -> int | None:
    """Digits after the point of q's finite decimal expansion when there are at most
    `most` of them, else None (also for a q with no finite expansion)."""
    if q.denominator > 10**most:  # 10^places is a multiple of the denominator
        return None
    for places in range(most + 1):
        if (q * 10**places).denominator == 1:
            return places
    return None


def _full(q: Fraction, places: int) -> str:
    """q written out in full: thousands separators in the integer part only."""
    scaled = abs(q.numerator * 10**places // q.denominator)
    whole, frac = divmod(scaled, 10**places)
    sign = "-" if q < 0 else ""
    return f"{sign}{whole:,}" + (f".{frac:0{places}d}".rstrip("0") if places else "")


@lru_cache(maxsize=512)
def _pow10_cached(k: int) -> int:
    return 10**k


def _pow10(k: int) -> int:
    """10^k for k >= 0 from two cached powers (a value's exponent search asks for many
    nearby k, each a big integer when a is tiny: 1e-300^64 has 19,200 digits)."""
    return _pow10_cached(k - k % 256) * _pow10_cached(k % 256)


def _scaled(n: int, d: int, k: int) -> tuple[int, int]:
    """(n / d) / 10^k as a numerator and denominator, in integers."""
    return (n, d * _pow10(k)) if k >= 0 else (n * _pow10(-k), d)


def _exponent(n: int, d: int) -> int:
    """floor(log10(n / d)) for n, d > 0, exactly (from bit lengths: no decimal string of a
    huge integer, which Python refuses past 4,300 digits)."""
    e = math.floor((n.bit_length() - d.bit_length()) * math.log10(2))
    while True:
        lo_n, lo_d = _scaled(n, d, e)
        if lo_n < lo_d:  # n/d < 10^e
            e -= 1
            continue
        hi_n, hi_d = _scaled(n, d, e + 1)
        if hi_n >= hi_d:  # n/d >= 10^(e+1)
            e += 1
            continue
        return e


def scientific(q: Fraction, digits: int = SIG_DIGITS) -> str:
    """q correctly rounded (half to even) to `digits` significant digits, as m.mmm e X;
    "~" in front when those digits are not exactly q."""
    if q == 0:
        return "0"
    n, d = abs(q.numerator), q.denominator
    e = _exponent(n, d)
    num, den = _scaled(n, d, e - digits + 1)
    m, r = divmod(num, den)
    if 2 * r > den or (2 * r == den and m % 2):
        m += 1
    if m == 10**digits:  # 9.99...95 rounds up to the next power of ten
        m //= 10
        e += 1
    return _write(m, e, digits, exact=r == 0, negative=q < 0)


def _write(m: int, e: int, digits: int, exact: bool, negative: bool) -> str:
    """The value m * 10^(e - digits + 1) (m of `digits` digits): positional for a moderate
    e, else with its exponent; "~" in front of a rounded value, which keeps all its digits."""
    mark = ("" if exact else "~") + ("-" if negative else "")
    if POSITIONAL[0] <= e < POSITIONAL[1]:  # ~19,605,347.6431: the same digits, placed
        places = digits - 1 - e
        if places <= 0:
            return mark + f"{m * 10**-places:,}"
        whole, frac = divmod(m, 10**places)
        frac_text = f"{frac:0{places}d}"
        return mark + f"{whole:,}." + (frac_text.rstrip("0") if exact else frac_text)
    ds = str(m).rstrip("0") if exact else str(m)
    mantissa = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
    return mark + f"{mantissa}e{e}"


def text(q: Fraction | int) -> str:
    """How the lab writes an exact value: integers in full with thousands separators
    (never rounded, up to 1,000 digits), a finite decimal of few digits in full,
    otherwise `scientific`."""
    q = Fraction(q)
    if q.denominator == 1 and q.numerator.bit_length() <= MAX_INTEGER_BITS:
        return f"{q.numerator:,}"
    places = _decimal_places(q, MAX_FULL_PLACES)
    if places is not None and q.denominator != 1:
        significant = len(str(abs(q.numerator * 10**places // q.denominator)).lstrip("0"))
        if significant <= MAX_FULL_DIGITS:
            return _full(q, places)
    return scientific(q)


def sqrt_text(q: Fraction, digits: int = 6) -> str:
    """sqrt(q) for q >= 0 in `text`'s notation: exact when it is a finite decimal of at
    most `digits` significant digits (sqrt(1/10000) = 0.01), else correctly rounded to
    `digits` significant digits (half up; a tie needs sqrt(q) rational) and marked "~".
    In integers (math.isqrt), so the init scale 0.02/sqrt(2L) is right to its last digit."""
    if q < 0:
        raise ValueError("sqrt_text needs q >= 0")
    if q == 0:
        return "0"
    n, d = q.numerator, q.denominator
    e = _exponent(n, d) // 2  # floor(log10 sqrt(q))
    k = e - digits + 1  # sqrt(q) / 10^k has `digits` digits before the point
    num, den = _scaled(n, d, 2 * k)  # q / 10^(2k)
    m = (math.isqrt(4 * num // den) + 1) // 2  # round(sqrt(q / 10^(2k))), half up
    exact = m * m * den == num and m < 10**digits
    if m == 10**digits:  # 9.999995 rounds up to the next power of ten
        m //= 10
        e += 1
    if exact:
        return text(Fraction(m) * Fraction(10) ** k)
    return _write(m, e, digits, exact=False, negative=False)
