"""The page's number writer and the server's, in Chromium: sentences the server fills
(depthlab.sigfig.sig, the beyond section's readings) and the numbers the page writes
itself (DL.fmt in charts.js, its hover read-outs) must read the same, digit for digit,
over a grid of values: both signs, every decade from 1e-25 to 1e25, the switch points
of the power-of-ten form, values that round up to the next decade, and binary ties."""

from __future__ import annotations

import math
import random
from pathlib import Path

from page_harness import BROWSER_MARKS

from depthlab.sigfig import sig

pytestmark = BROWSER_MARKS

JS = Path(__file__).resolve().parent.parent / "depthlab" / "web" / "static" / "js"


def grid() -> list[float]:
    rng = random.Random(20261202)
    values = [0.0, 1.0, 1e-3, 9.9995e-4, 9999.4, 9999.5, 9999.96, 1e4, 0.5, 1.25, 2.5, 0.125,
              9.995, 99.95, 0.0009995, 1.4e-20, 123456789.0, 1.7976931348623157e308]
    values += [10.0 ** e for e in range(-25, 26)]
    values += [rng.uniform(1, 10) * 10.0 ** rng.randint(-25, 25) for _ in range(400)]
    values += [k / 8 for k in range(1, 200)]  # exact binary ties at 2 and 3 digits
    return values + [-v for v in values]


def test_sig_writes_what_dl_fmt_writes(browser):
    page = browser.new_page()
    page.set_content("<!doctype html><title>fmt</title>")
    page.add_script_tag(content=(JS / "charts.js").read_text(encoding="utf-8"))
    values = grid()
    for digits in (2, 3, 4):
        shown = page.evaluate("([vs, d]) => vs.map((v) => DL.fmt(v, d))", [values, digits])
        differ = [(v, js, sig(v, digits)) for v, js in zip(values, shown, strict=True)
                  if js != sig(v, digits)]
        assert differ == [], differ[:5]
    assert page.evaluate("() => DL.fmt(null, 3)") == sig(None) == sig(math.inf)
    page.close()
