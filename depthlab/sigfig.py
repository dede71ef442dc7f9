"""Numbers written as the page writes them, so a sentence made on the server reads like
one the page fills: `sig(v, digits)` is `DL.fmt` of web/static/js/charts.js, digit for
digit (3 significant digits by default, trailing zeros dropped; below 1e-3 or from 1e4
up a mantissa and a power of ten, "1.4 × 10⁻²⁰"; "—" for a missing or infinite value).

JavaScript's `toPrecision` rounds the exact binary value half up, which Python's format
does not (half even), so `to_precision` rounds a Decimal; tests/test_page_readings_parity.py
runs both on the same grid.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

_SUP = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def to_precision(x: float, p: int) -> str:
    """JavaScript's `x.toPrecision(p)` for a finite x."""
    if x == 0:
        return "0" if p == 1 else "0." + "0" * (p - 1)
    sign = "-" if x < 0 else ""
    exact = Decimal(abs(x))
    e = exact.adjusted()
    n = int(exact.scaleb(p - 1 - e).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    if n >= 10 ** p:  # 9.995 to 3 digits: 10.0, one more power of ten
        n //= 10
        e += 1
    digits = str(n)
    if e < -6 or e >= p:
        return f"{sign}{digits[0]}{'.' + digits[1:] if p > 1 else ''}e{'+' if e >= 0 else '-'}{abs(e)}"
    if e >= 0:
        return sign + digits[:e + 1] + ("." + digits[e + 1:] if p > e + 1 else "")
    return sign + "0." + "0" * (-e - 1) + digits


def _js_string(x: float) -> str:
    """JavaScript's `String(x)` for 1e-6 <= |x| < 1e21 or 0: the shortest digits, fixed."""
    if x == 0:
        return "0"
    return format(Decimal(repr(x)).normalize(), "f")


def sig(v: float | None, digits: int = 3) -> str:
    """`DL.fmt(v, digits)`: see the module's docstring."""
    if v is None or not math.isfinite(v):
        return "—"
    a = abs(v)
    if a != 0 and (a < 1e-3 or a >= 1e4):
        md = max(2, digits - 1)
        e = math.floor(math.log10(a))
        m = v / math.pow(10, e)
        if abs(float(to_precision(m, md))) >= 10:
            m /= 10
            e += 1
        return to_precision(m, md) + " × 10" + str(e).translate(_SUP)
    return _js_string(float(to_precision(v, digits)))
