"""Sentences of the docs that quote measured numbers say what the committed scripts
measure now: docs/probes.md's orders of magnitude between g = 0.5 and g = 2."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_probes_doc_quotes_the_orders_of_magnitude_the_tested_seeds_give():
    report = load("probes_report")
    report.use_single_thread()
    text = (ROOT / "docs" / "probes.md").read_text(encoding="utf-8")
    said = text.split(report.ORDERS_BEGIN, 1)[1].split(report.ORDERS_END, 1)[0]
    now = report.orders_text()
    # the same sentence; each range end within one unit of its last digit (another CPU
    # may round the 22nd decimal of a gradient ratio differently)
    number = re.compile(r"\d+\.\d")
    assert number.sub("#", said) == number.sub("#", now)
    assert [float(x) for x in number.findall(said)] == pytest.approx(
        [float(x) for x in number.findall(now)], abs=0.11)
    assert "orders of magnitude over seeds 0-9" in said and "over seeds 1000-1009" in said
