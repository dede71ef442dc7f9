"""Probe results as strict JSON: NaN and infinities become null (no torch needed here)."""

from __future__ import annotations

import math


def json_number(value: float) -> float | None:
    """A float for JSON: NaN and infinities (0/0 when a stream dies out) become null."""
    return value if math.isfinite(value) else None


def json_list(values: tuple[float, ...]) -> list[float | None]:
    return [json_number(v) for v in values]
