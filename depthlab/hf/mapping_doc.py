"""The one Hugging Face mapping in words: docs/real-models.md's table and the CLI help,
generated from `depthlab/hf/mapping.py` so that neither can drift from what the code reads."""

from __future__ import annotations

import textwrap

from depthlab.hf.mapping import FAMILIES, ROPE_FIELD, Family, Field, as_json, families_for

ROPE_NEWER = "rope_parameters.rope_theta"  # Transformers >= 5; rope_theta at the top before


def _missing(f: Field) -> str:
    if f.default is not None:
        return as_json(f.default)
    return "as null" if f.null is not None else "required"


def field_rows(fams: list[Family] | None = None) -> list[tuple[str, str, str, str, str]]:
    """(config.json field, model.<field>, missing means, null means, families): one row per
    field, the families that spell it alike merged, their defaults side by side."""
    rows: dict[tuple[str, str], tuple[str, dict[str, list[str]]]] = {}
    for fam in fams or list(FAMILIES.values()):
        for f in fam.fields:
            null, by_default = rows.setdefault((f.hf, f.ours), (f.null_means, {}))
            by_default.setdefault(_missing(f), []).append(fam.name)
    out = []
    for (hf, ours), (null, by_default) in rows.items():
        names = [n for n in FAMILIES if any(n in group for group in by_default.values())]
        missing = "; ".join(f"{v} ({', '.join(group)})" if len(by_default) > 1 else v
                            for v, group in by_default.items())
        out.append((hf, f"model.{ours}", missing, null, ", ".join(names)))
    return out


def markdown_table() -> str:
    """docs/real-models.md's table (tests/test_hf_mapping.py checks the page holds exactly this)."""
    lines = ["| config.json | depthlab | missing | null | families |", "|---|---|---|---|---|"]
    for hf, ours, missing, null, names in field_rows():
        hf_cell = f"`{hf}`" + (f" (or `{ROPE_NEWER}`)" if hf == ROPE_FIELD else "")
        lines.append(f"| {hf_cell} | `{ours}` | {missing} | {null} | {names} |")
    lines.append("")
    for fam in FAMILIES.values():
        fixed = ", ".join(f"{s.ours}={as_json(s.value)}" for s in fam.switches)
        what = fam.architecture or "anatomy only"
        lines.append(f"- `{fam.name}` ({what}): {fixed}" + (f". {fam.note}" if fam.note else ""))
    return "\n".join(lines)


def help_text(purpose: str) -> str:
    """The families and fields one purpose reads, for `depthlab hf import --help` and
    `depthlab anatomy --help`."""
    fams = families_for(purpose)
    lines = ["config.json fields (missing: Transformers' class default):"]
    for hf, ours, missing, null, _names in field_rows(fams):
        spelled = f"{ROPE_NEWER} or {hf}" if hf == ROPE_FIELD else hf
        lines.append(f"  {spelled} -> {ours} (missing: {missing}"
                     + (f"; null: {null})" if null else ")"))
    lines.append("families:")
    for fam in fams:
        fixed = ", ".join(f"{s.ours}={as_json(s.value)}" for s in fam.switches)
        where = f"{fam.architecture}" if fam.architecture else f"model_type {fam.name}"
        lines.append(textwrap.fill(
            f"{fam.name} ({where}{', its ' + fam.nested if fam.nested else ''}): {fixed}",
            width=92, initial_indent="  ", subsequent_indent="    "))
    return "\n".join(lines)
