"""Which configs a fast path computes, declared as data and checked one way for all.

A fast path (the cached decode step, model/decode.py; the fused RoPE of training,
model/fused.py) computes what the readable forward computes, for some configs only.
Each declares, per ModelConfig field, the values it computes (`ANY`: every value) and,
where it replaces only part of the forward, the fields that never reach that part
(exempt). `config_reason` names the first switch outside the declaration, said as the
user sets it, and the caller takes the readable path with that reason: a field declared
nowhere falls back at any value but its default. `undecided` is what the tests walk
(tests/test_decode.py, tests/test_fused.py): a new field fails them until each fast path
says what it does with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from depthlab.config import ModelConfig

ANY = None  # every value of the field: it does not change the fast path's arithmetic
Implements = Mapping[str, "frozenset | None"]


def config_reason(cfg: ModelConfig, implements: Implements, what: str,
                  exempt: Collection[str] = ()) -> str | None:
    """The first switch of `cfg` that `implements` does not cover, or None."""
    for f in dataclasses.fields(cfg):
        if f.name in exempt:
            continue
        value = getattr(cfg, f.name)
        if f.name not in implements:
            if value != f.default:
                return f"model.{f.name}={value}, which {what} does not implement"
            continue
        allowed = implements[f.name]
        if allowed is not ANY and value not in allowed:
            return f"model.{f.name}={value}, which {what} does not implement"
    return None


def undecided(implements: Implements, exempt: Collection[str] = ()) -> list[str]:
    """ModelConfig's fields that a fast path neither declares nor exempts, and the names
    it declares or exempts that are no field (a stale entry), in field order."""
    fields = [f.name for f in dataclasses.fields(ModelConfig)]
    stale = sorted((set(implements) | set(exempt)) - set(fields))
    both = sorted(set(implements) & set(exempt))  # one story per field
    return [n for n in fields if n not in implements and n not in exempt] + stale + both
