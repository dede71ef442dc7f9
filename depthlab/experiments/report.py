"""Turn an analysis into files: export.json (what the page draws), PNG and SVG
charts (matplotlib) and summary.md (numbers and the conclusions drawn from them).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from depthlab import __version__
from depthlab.experiments.spec import Experiment, Report, now_iso
from depthlab.rundir import atomic_write, atomic_write_text

EXPORT_FILE = "export.json"
MAX_POINTS = 1000
RED, GREEN, BLUE, ORANGE, PURPLE, GREY = (
    "#d62728", "#2ca02c", "#1f77b4", "#ff7f0e", "#9467bd", "#7f7f7f")


def downsample(x: list[float], y: list[float], limit: int = MAX_POINTS) -> tuple[list, list]:
    """Every k-th point (always keeping the last), so a series has at most `limit` points."""
    if len(x) <= limit:
        return list(x), list(y)
    step = math.ceil(len(x) / limit)
    idx = list(range(0, len(x), step))
    if idx[-1] != len(x) - 1:
        idx[-1] = len(x) - 1
    return [x[i] for i in idx], [y[i] for i in idx]


def _finite(ys: list[float]) -> list[float | None]:
    return [None if v is None or not math.isfinite(v) else v for v in ys]


def series(label: str, x: list[float], y: list[float], color: str | None = None,
           dash: bool = False, lo: list[float] | None = None,
           hi: list[float] | None = None) -> dict[str, Any]:
    """One line; lo/hi (optional, same length as x) give the band of the seed spread."""
    xs, ys = downsample(x, y)
    out = {"label": label, "x": xs, "y": _finite(ys), "color": color, "dash": dash}
    if lo is not None and hi is not None:
        out["lo"], out["hi"] = _finite(downsample(x, lo)[1]), _finite(downsample(x, hi)[1])
    return out


def chart(id: str, title: dict, x_label: dict, y_label: dict, series_: list[dict],
          y_log: bool = False) -> dict[str, Any]:
    return {"id": id, "title": title, "x_label": x_label, "y_label": y_label,
            "y_log": y_log, "series": series_}


def _cjk_font() -> str | None:
    from matplotlib import font_manager

    for f in font_manager.fontManager.ttflist:
        if "WenQuanYi" in f.name or "Noto Sans CJK" in f.name:
            return f.name
    return None


LEGEND_INSIDE_MAX = 6  # series; with more, the legend goes beside the axes


def draw_chart(spec: dict[str, Any], stem: Path) -> list[Path]:
    """One chart as PNG and SVG; labels in English and Chinese when a CJK font exists."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cjk = _cjk_font()
    label = (lambda t: f"{t['en']}\n{t['zh']}") if cjk else (lambda t: t["en"])
    rc = {"font.family": ["DejaVu Sans", cjk]} if cjk else {}
    with plt.rc_context({**rc, "svg.hashsalt": "depthlab", "axes.unicode_minus": False}):
        from matplotlib.ticker import MaxNLocator

        crowded = len(spec["series"]) > LEGEND_INSIDE_MAX  # a legend that would hide lines
        fig, ax = plt.subplots(figsize=(10.5 if crowded else 7.5, 4.6), dpi=110)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        for s in spec["series"]:
            xs = [x for x, y in zip(s["x"], s["y"], strict=True) if y is not None]
            ys = [y for y in s["y"] if y is not None]
            line, = ax.plot(xs, ys, label=s["label"], color=s["color"],
                            linestyle="--" if s["dash"] else "-",
                            marker="o" if len(xs) <= 60 else None, markersize=3)
            if "lo" in s:
                band = [(x, lo, hi) for x, lo, hi in zip(s["x"], s["lo"], s["hi"], strict=True)
                        if lo is not None and hi is not None]
                if band:
                    bx, blo, bhi = zip(*band, strict=True)
                    ax.fill_between(bx, blo, bhi, color=line.get_color(), alpha=0.18, linewidth=0)
        if spec["y_log"]:
            ax.set_yscale("log")
        ax.set_title(label(spec["title"]), fontsize=10)
        ax.set_xlabel(label(spec["x_label"]), fontsize=9)
        ax.set_ylabel(label(spec["y_label"]), fontsize=9)
        ax.grid(alpha=0.3)
        if crowded:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        else:
            ax.legend(fontsize=8)
        fig.tight_layout()
        paths = []
        for ext in ("png", "svg"):
            path = stem.with_suffix(f".{ext}")
            atomic_write(path, lambda tmp, ext=ext: fig.savefig(
                tmp, format=ext, metadata={"Date": None} if ext == "svg" else None))
            paths.append(path)
        plt.close(fig)
    return paths


def write_outputs(root: Path, exp: Experiment, report: Report, *, budget: str,
                  command: str, seeds: list[int] | None = None) -> dict[str, Any]:
    export = {
        "experiment": exp.name,
        "question": exp.questions,
        "exported_at": now_iso(),
        "depthlab_version": __version__,
        "command": command,
        "budget": budget,
        **({"seeds": seeds} if seeds is not None else {}),
        "charts": report.charts,
        "table": report.table,
        "conclusions": report.conclusions,
    }
    if report.baselines is not None:
        export["baselines"] = report.baselines
    if report.per_seed is not None:
        export["per_seed"] = report.per_seed
    atomic_write_text(root / EXPORT_FILE,
                      json.dumps(export, ensure_ascii=False, allow_nan=False, indent=1))
    for spec in report.charts:
        draw_chart(spec, root / f"{exp.name}-{spec['id']}")
    atomic_write_text(root / "summary.md", summary_markdown(export))
    return export


def summary_markdown(export: dict[str, Any]) -> str:
    lines = [f"# {export['experiment']}", "", export["question"]["en"], "",
             f"Budget `{export['budget']}`"
             + (f", seeds {', '.join(map(str, export['seeds']))}" if export.get("seeds") else "")
             + f", exported {export['exported_at']} by depthlab "
             f"{export['depthlab_version']}: `{export['command']}`", ""]
    table = export["table"]
    if table["columns"]:
        lines.append("| " + " | ".join(table["columns"]) + " |")
        lines.append("|" + " --- |" * len(table["columns"]))
        for row in table["rows"]:
            lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
        lines.append("")
    if export["conclusions"]:
        lines.append("## What the data show")
        lines.append("")
        lines += [f"- {c['en']}" for c in export["conclusions"]]
        lines.append("")
    lines += [f"![{c['title']['en']}]({export['experiment']}-{c['id']}.png)"
              for c in export["charts"]]
    return "\n".join(lines) + "\n"


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


# --- statistics over seeds ---------------------------------------------------------

def mean(values: list[float]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def spread(values: list[float]) -> float:
    """Half the range over seeds (0 for one seed): the +- we print."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return (max(finite) - min(finite)) / 2 if len(finite) > 1 else 0.0


def fmt(values: list[float]) -> str:
    m = mean(values)
    if not math.isfinite(m):
        return "diverged"
    s = spread(values)
    return f"{m:.4f} ± {s:.4f}" if len([v for v in values if v is not None]) > 1 else f"{m:.4f}"


def compare(a: list[float], b: list[float]) -> tuple[float, bool]:
    """Gap mean(b) - mean(a), and whether it exceeds the seeds' spread (with one seed
    there is no spread to exceed: analysis.seed_note says so beside the claim)."""
    gap = mean(b) - mean(a)
    if min(len(a), len(b)) < 2:
        return gap, True
    return gap, abs(gap) > spread(a) + spread(b)


# --- the export.json schema (docs/experiments.md), checked by tests and the server --

def validate_export(obj: Any) -> list[str]:
    """Problems with an export.json object; an empty list means it follows the schema."""
    problems: list[str] = []

    def need(cond: bool, what: str) -> None:
        if not cond:
            problems.append(what)

    def is_text(t: Any) -> bool:
        return isinstance(t, dict) and isinstance(t.get("en"), str) and isinstance(t.get("zh"), str)

    need(isinstance(obj, dict), "top level must be an object")
    if problems:
        return problems
    for key in ("experiment", "exported_at", "depthlab_version", "command", "budget"):
        need(isinstance(obj.get(key), str), f"{key} must be a string")
    need(is_text(obj.get("question")), "question must be {en, zh}")
    charts = obj.get("charts")
    need(isinstance(charts, list), "charts must be a list")
    for i, c in enumerate(charts if isinstance(charts, list) else []):
        for key in ("title", "x_label", "y_label"):
            need(is_text(c.get(key)), f"charts[{i}].{key} must be {{en, zh}}")
        need(isinstance(c.get("id"), str), f"charts[{i}].id must be a string")
        need(isinstance(c.get("y_log"), bool), f"charts[{i}].y_log must be a boolean")
        for j, s in enumerate(c.get("series", [])):
            x, y = s.get("x"), s.get("y")
            ok = isinstance(x, list) and isinstance(y, list) and len(x) == len(y)
            need(ok, f"charts[{i}].series[{j}]: x and y must be lists of equal length")
            need(ok and len(x) <= MAX_POINTS, f"charts[{i}].series[{j}]: over {MAX_POINTS} points")
            need(isinstance(s.get("label"), str), f"charts[{i}].series[{j}].label must be a string")
            if "lo" in s or "hi" in s:
                need(ok and all(isinstance(s.get(k), list) and len(s[k]) == len(x)
                                for k in ("lo", "hi")),
                     f"charts[{i}].series[{j}]: lo and hi must be lists as long as x")
    table = obj.get("table")
    need(isinstance(table, dict) and isinstance(table.get("columns"), list)
         and isinstance(table.get("rows"), list), "table must be {columns: [], rows: []}")
    if "baselines" in obj:
        b = obj["baselines"]
        need(isinstance(b, dict) and all(isinstance(b.get(k), int | float)
                                         for k in ("unigram", "bigram", "tokens")),
             "baselines must be {unigram, bigram, tokens, ...} numbers")
    for arm, runs in (obj.get("per_seed") or {}).items():
        lists = [runs.get(k) for k in ("seed", "final_val_loss", "completed")]
        need(all(isinstance(v, list) and len(v) == len(lists[0]) for v in lists)
             and isinstance(runs.get("steps"), int),
             f"per_seed[{arm}] must be {{seed, final_val_loss, completed: equal lists, steps}}")
    conclusions = obj.get("conclusions")
    need(isinstance(conclusions, list) and all(is_text(c) for c in conclusions),
         "conclusions must be a list of {en, zh}")
    return problems
