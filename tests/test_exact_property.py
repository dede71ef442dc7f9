"""Every exact figure of the page and the CLI against closed forms, over the page's whole
input range (Hypothesis): the path expansion's counts C(N, k) and 2^N, its terms
C(N, k) a^k, their sum (1 + a)^N and the Jacobian, with a negative, zero or positive,
typed as a decimal. The closed forms are computed here independently (math.comb, powers
of a Fraction, the decimal module for correct rounding), not with the code under test."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Context, Decimal
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from depthlab.cli import main
from depthlab.probes import residual_paths
from depthlab.probes.exact import init_scale_text
from depthlab.probes.exactnum import SIG_DIGITS, parse_decimal, scientific, sqrt_text, text
from depthlab.web import compute, lesson
from depthlab.web.schemas import PathsRequest

N_LO, N_HI = lesson.limits()["paths_n"]  # the page's bounds, as /api/meta publishes them
A_LO, A_HI = lesson.limits()["paths_a"]

depths = st.integers(min_value=N_LO, max_value=N_HI)
# a as a person types it: up to 6 decimals anywhere in the range, small and tiny values
# near zero, and any float of the range (read by its shortest repr, as JSON carries it)
typed = st.one_of(*(
    st.decimals(min_value=A_LO, max_value=A_HI, places=p, allow_nan=False, allow_infinity=False)
    for p in range(7)))
tiny = st.builds(lambda m, e: Decimal(m).scaleb(-e), st.integers(-999, 999), st.integers(3, 40))
floats = st.floats(min_value=A_LO, max_value=A_HI, allow_nan=False).map(lambda f: Decimal(repr(f)))
scales = st.one_of(typed, tiny.filter(lambda d: A_LO <= d <= A_HI), floats)


def read_back(s: str) -> Fraction:
    """The value a text names: exact digits, or (marked ~) correctly rounded ones."""
    return Fraction(Decimal(s.lstrip("~").replace(",", "")))


def check_text(s: str, q: Fraction) -> None:
    """s is q in full, or (marked ~) q correctly rounded to SIG_DIGITS significant digits."""
    if s.startswith("~"):
        ctx = Context(prec=SIG_DIGITS, rounding=ROUND_HALF_EVEN, Emax=10**6, Emin=-10**6)
        want = ctx.divide(Decimal(q.numerator), Decimal(q.denominator))
        assert Decimal(s[1:].replace(",", "")) == want, (s, q)
        assert read_back(s) != q  # "~" only where the digits are not the value
        assert len(s[1:].replace(",", "").replace(".", "").lstrip("-0").split("e")[0]) == SIG_DIGITS
    else:
        assert read_back(s) == q, (s, q)
    if q.denominator == 1:  # an integer is never rounded: all its digits, grouped by three
        assert s == f"{q.numerator:,}"


def check_expansion(j: dict, n: int, a: Fraction, x0: Fraction = Fraction(1)) -> None:
    closed = (1 + a) ** n * x0
    assert j["depth"] == n
    check_text(j["scale_text"], a)
    assert j["n_paths_text"] == f"{2**n:,}" and j["n_paths"] == 2**n
    assert [g["layers_passed"] for g in j["groups"]] == list(range(n + 1))
    for k, g in enumerate(j["groups"]):
        assert g["n_paths_text"] == f"{math.comb(n, k):,}" and g["n_paths"] == math.comb(n, k)
        check_text(g["value_each_text"], a**k * x0)
        check_text(g["total_text"], math.comb(n, k) * a**k * x0)
    check_text(j["residual_output_text"], closed)  # sum_k C(N,k) a^k x0 == (1 + a)^N x0
    check_text(j["jacobian_text"], (1 + a) ** n)
    check_text(j["jacobian_factor_text"], 1 + a)
    check_text(j["plain_output_text"], a**n * x0)
    check_text(j["plain_jacobian_text"], a**n)
    # the floats beside the texts: the exact values correctly rounded (JSON null past a float)
    for key, q in (("residual_output", closed), ("jacobian", (1 + a) ** n), ("plain_output", a**n * x0)):
        try:
            assert j[key] == float(q)
        except OverflowError:
            assert j[key] is None
    if 2**n <= 16:  # the listed paths: one per subset of the layers, each a^|subset| x0
        assert len(j["paths"]) == 2**n
        for p in j["paths"]:
            check_text(p["value_text"], a ** len(p["layers"]) * x0)


@settings(max_examples=300, deadline=None)
@given(n=depths, a=scales)
@example(n=64, a=Decimal(-2))
@example(n=64, a=Decimal(-1))
@example(n=64, a=Decimal(0))
@example(n=64, a=Decimal("-0.1"))
@example(n=64, a=Decimal(10))
@example(n=64, a=Decimal(-10))
@example(n=1, a=Decimal("-1e-300"))
def test_the_page_paths_are_the_closed_forms(n, a):
    """What /api/paths sends (and the static copy embeds): a reaches the server as a JSON
    number and is read by its shortest decimal form, so the typed decimal itself."""
    j = compute.paths(PathsRequest(n=n, a=float(a)))
    check_expansion(j, n, parse_decimal(float(a)))
    if len(a.as_tuple().digits) <= 15:  # a decimal of at most 15 digits survives the float
        assert parse_decimal(float(a)) == Fraction(a)


@settings(max_examples=60, deadline=None)
@given(n=depths, a=scales, x0=st.decimals(min_value=-1000, max_value=1000, places=3))
def test_the_cli_paths_are_the_closed_forms(n, a, x0):
    """The CLI reads a and x0 as the decimal strings typed."""
    p = residual_paths(n, str(a), str(x0))
    check_expansion(p.to_json(), n, Fraction(a), Fraction(x0))


@pytest.mark.parametrize("n, a, total", [(64, "-2", "1"), (64, "-1", "0"), (64, "0", "1"),
                                         (2, "0.5", "2.25"), (10, "1", "1,024"),
                                         (64, "1", "18,446,744,073,709,551,616")])
def test_known_answers(n, a, total):
    j = residual_paths(n, a).to_json()
    assert j["residual_output_text"] == total == j["jacobian_text"]


def test_known_counts():
    assert residual_paths(10, "0.5").to_json()["n_paths_text"] == "1,024"
    g = residual_paths(64, "2").to_json()["groups"]
    assert (g[2]["n_paths_text"], g[2]["total_text"]) == ("2,016", "8,064")
    assert g[32]["n_paths_text"] == "1,832,624,140,942,590,534"  # C(64, 32): more digits than a float


def test_the_cli_prints_the_exact_sum(capsys):
    assert main(["probe", "paths", "--depth", "64", "--scale=-2"]) == 0
    out = capsys.readouterr().out
    assert "residual stack: the sum = 1;" in out and "= (-1)^64 = 1;" in out
    assert main(["probe", "paths", "--depth", "10", "--scale", "0.5"]) == 0
    assert "1,024 paths" in capsys.readouterr().out


@settings(max_examples=300, deadline=None)
@given(num=st.integers(-10**80, 10**80), den=st.integers(1, 10**40))
def test_text_is_the_value_in_full_or_correctly_rounded(num, den):
    check_text(text(Fraction(num, den)), Fraction(num, den))


def test_text_rounds_half_to_even_and_carries_into_the_exponent():
    assert scientific(Fraction(9_999_999_999_995, 10**13)) == "~1.00000000000"
    assert scientific(Fraction(99_999_999_999_950, 10**13)) == "~10.0000000000"
    assert scientific(Fraction(1, 10**64)) == "1e-64"
    assert text(Fraction(-1, 8)) == "-0.125" and text(Fraction(1, 3)) == "~0.333333333333"
    assert text(Fraction(-1_234_567, 1000)) == "-1,234.567"


@pytest.mark.parametrize("bad", ["nan", "inf", "1e9999", "0x10", "1,5", "", "--1", "1e-1000"])
def test_typed_decimals_refused_with_the_field_named(bad):
    from depthlab.errors import UserError

    with pytest.raises(UserError, match="^scale must be a decimal number"):
        residual_paths(2, bad)


def test_typed_decimals_accept_unicode_minus_and_full_width_digits():
    assert parse_decimal("\u22120.1") == Fraction(-1, 10)
    assert parse_decimal("\uff10\uff0e\uff15") == Fraction(1, 2)


def _rounded_sqrt_ok(s: str, q: Fraction, digits: int = 6) -> bool:
    """s is sqrt(q) exactly, or (marked ~) the `digits`-digit value nearest to it: the
    value v, its last digit's unit u, and (v - u/2)^2 <= q <= (v + u/2)^2."""
    v = read_back(s)
    if not s.startswith("~"):
        return v * v == q
    sig = s[1:].replace(",", "").replace(".", "").split("e")[0].lstrip("0")
    e = Decimal(s[1:].replace(",", "")).adjusted()  # the exponent of the first digit
    u = Fraction(10) ** (e - digits + 1)
    return len(sig) == digits and (v - u / 2) ** 2 <= q <= (v + u / 2) ** 2 and v * v != q


@settings(max_examples=300, deadline=None)
@given(std=st.decimals(min_value="0.0001", max_value="10", places=4), writes=st.integers(1, 4096))
def test_the_depth_scaled_init_is_the_rounded_square_root(std, writes):
    """0.02/sqrt(2L) and the like, for every base std and number of writes a config can have."""
    rule, value = init_scale_text(float(std), writes)
    assert rule == f"{text(Fraction(std))}/√{writes}"
    assert _rounded_sqrt_ok(value, Fraction(std) ** 2 / writes)


def test_init_scale_known_answers():
    assert init_scale_text(0.02, 8) == ("0.02/√8", "~0.00707107")
    assert init_scale_text(0.02, 4) == ("0.02/√4", "0.01")  # exact: no ~
    assert init_scale_text(0.02, 24)[1] == "~0.00408248"  # GPT-2's 12 blocks
    assert sqrt_text(Fraction(99_999_999, 10**8)) == "~1.00000"  # rounds up into the next decade


def test_the_evolution_rows_carry_the_exact_init_and_counts():
    from depthlab.probes import evolution_table

    for row in evolution_table():
        assert isinstance(row["total_params"], int)
        value = read_back(row["residual_init_std_text"])
        assert float(value) == pytest.approx(row["residual_init_std"], rel=1e-5)
        if row["residual_init_rule"]:
            assert _rounded_sqrt_ok(row["residual_init_std_text"],
                                    Fraction(repr(0.02)) ** 2 / row["n_writes"])
