"""Write what the residual-frontier experiment measured into docs/residual-frontier.md.

    depthlab experiment residual-frontier --budget standard --out runs/standard
    python scripts/frontier_results.py runs/standard/residual-frontier

Replaces the text between each `<!-- frontier:NAME:start -->` / `<!-- frontier:NAME:end -->`
pair of the page (one per design, and `summary`) with numbers read from the experiment's
export.json and frontier.json, and copies both files to docs/results/, so no number on
that page is typed by hand. Without an exported experiment, each section says so.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "residual-frontier.md"
NAME = "residual-frontier"
# design section -> the arms it reports (the C8 pair goes under DeepNorm)
SECTIONS = {"deepnorm": ("deepnorm", "post-ln"), "rezero": ("rezero",), "lns": ("lns",),
            "dyt": ("dyt",), "value-residual": ("value-residual",), "hc": ("hc",),
            "mhc": ("mhc",), "attnres": ("attnres",)}
MARKER = re.compile(r"(<!-- frontier:([\w-]+):start -->)(.*?)(<!-- frontier:\2:end -->)", re.S)
NOT_RUN = ("*Not measured yet.* Run `depthlab experiment residual-frontier --budget standard "
           "--out runs/standard`, then `python scripts/frontier_results.py "
           "runs/standard/residual-frontier`.")


def _loss(entry: dict) -> str:
    if entry["mean"] is None:
        return "diverged"
    n = len(entry["final_val_loss"])
    return f"{entry['mean']:.4f} ± {entry['spread']:.4f} ({n} seeds)" if n > 1 else (
        f"{entry['mean']:.4f} (1 seed, no spread)")


def _versus(entry: dict, plain: dict | None) -> str:
    """The gap to plain at the same depth, called a difference only beyond both spreads."""
    if plain is None or entry["mean"] is None or plain["mean"] is None:
        return ""
    gap = entry["mean"] - plain["mean"]
    noise = entry["spread"] + plain["spread"]
    if min(len(entry["final_val_loss"]), len(plain["final_val_loss"])) < 2:
        verdict = "one seed: no difference claimed"
    elif abs(gap) > noise:
        verdict = f"beyond the seed spread ±{noise:.4f}"
    else:
        verdict = f"within the seed spread ±{noise:.4f}: no difference claimed"
    return f"; against plain {plain['mean']:.4f}: {gap:+.4f}, {verdict}"


def arm_lines(key: str, entry: dict, data: dict) -> list[str]:
    depth, arm = entry["depth"], entry["arm"]
    plain = data["arms"].get(f"L{depth}-plain")
    compared = entry["warmup"] and arm != "plain"  # the C8 pair trains otherwise
    line = (f"- **{entry['label']}, {depth} layers**: final validation loss {_loss(entry)}"
            + (_versus(entry, plain) if compared else ""))
    rms, g0, g1 = (entry["stream_rms_trained"], entry["grad_per_block_init"],
                   entry["grad_per_block_trained"])
    if rms:
        line += f"; stream RMS after the last write {rms[-1]:.3g} ({rms[-1] / rms[0]:.2g}x the embedding's)"
    if len(g0) > 1 and len(g1) > 1 and g0[-1] and g1[-1]:
        line += (f"; bottom / top block gradient {g0[0] / g0[-1]:.2g} at init, "
                 f"{g1[0] / g1[-1]:.2g} after training")
    timing = data.get("timing") or {}
    t = timing.get("arms", {}).get(arm) if timing.get("depth") == depth else None
    if t is not None and t.get("vs_plain") is not None:
        line += f"; time per step {t['thread_median_ms']:.1f} ms, {t['vs_plain']:.2f}x plain's"
    learned = (data.get("learned") or {}).get(key) or {}
    if learned.get("mixing"):
        line += (f"; {len(learned['mixing'])} learned mixing matrices, composite gain "
                 f"{learned['composite_gain']:.3g}")
    if learned.get("depth_weights"):
        line += f"; depth weights of {len(learned['depth_weights'])} sublayers"
    return [line + "."]


def render(export: dict | None, data: dict | None) -> dict[str, str]:
    """Section name -> its markdown, from the exported files (None: not run yet)."""
    if export is None or data is None:
        return {name: NOT_RUN for name in [*SECTIONS, "summary"]}
    head = (f"*Measured: budget `{export['budget']}`, `{export['command']}`, exported "
            f"{export['exported_at']} by depthlab {export['depthlab_version']}.*")
    out = {}
    for name, arms in SECTIONS.items():
        lines = []
        for key, entry in sorted(data["arms"].items(), key=lambda kv: kv[1]["depth"]):
            if entry["arm"] in arms:
                lines += arm_lines(key, entry, data)
        out[name] = "\n".join([head, ""] + (lines or [
            f"Not an arm of the `{export['budget']}` budget's grid."]))
    out["summary"] = "\n".join([head, ""] + [f"- {c['en']}" for c in export["conclusions"]])
    return out


def fill(page: str, sections: dict[str, str]) -> str:
    """The page with every marked section replaced (unknown names are left alone)."""
    def sub(m: re.Match) -> str:
        body = sections.get(m.group(2))
        return m.group(0) if body is None else f"{m.group(1)}\n{body}\n{m.group(4)}"
    return MARKER.sub(sub, page)


def main(argv: list[str]) -> int:
    folder = Path(argv[1] if len(argv) > 1 else f"runs/standard/{NAME}")
    export_path, data_path = folder / "export.json", folder / "frontier.json"
    if not export_path.exists() or not data_path.exists():
        print(f"{folder} holds no exported residual-frontier (export.json and frontier.json); "
              f"run: depthlab experiment {NAME} --budget standard --out {folder.parent}",
              file=sys.stderr)
        return 2
    export = json.loads(export_path.read_text(encoding="utf-8"))
    data = json.loads(data_path.read_text(encoding="utf-8"))
    results = ROOT / "docs" / "results"
    results.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(export_path, results / f"{NAME}.export.json")  # the numbers behind the text
    shutil.copyfile(data_path, results / f"{NAME}.frontier.json")
    PAGE.write_text(fill(PAGE.read_text(encoding="utf-8"), render(export, data)), encoding="utf-8")
    print(f"{PAGE.relative_to(ROOT)} rewritten from {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
