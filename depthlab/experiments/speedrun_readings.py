"""The page's speedrun section ("How the field trains the stream today"), computed here
from the experiment's export.json and shipped whole: the leaderboard in its order, the
loss-against-CPU-seconds curves on one x axis, each learned value per layer at the start
and the end of training, and a one-line reading of each in every language. The page
fills no number of its own; it shows these sentences and draws the data.

It reads what every speedrun export holds: `per_seed` (each arm's seeds: steps, CPU
seconds and ratio to the target) and the charts `val_loss_cpu` (seed-mean curves) and
`learned_<arm>_<key>` (a learned value per layer over steps), so an export written
before this module draws as well. Whether an arm pays is speedrun's own rule
(`Race.pays`), applied to the same per-seed numbers. The templates are the page's
`sr.*` keys; numbers are written by `depthlab.sigfig.sig`, as the page writes them.
"""

from __future__ import annotations

import math
from typing import Any

from depthlab.experiments.report import mean, spread
from depthlab.experiments.speedrun import (
    BASELINE,
    BEST,
    GOAL,
    REFERENCE,
    Hit,
    Race,
    arm_words,
    learned_chart_id,
)
from depthlab.experiments.wording import Text, joined
from depthlab.locales import LANGS, table, text
from depthlab.metrics import LEARNED_KEYS
from depthlab.sigfig import sig

X0_KEY = "x0_mix_x0"  # the embedding shortcut's weight per layer: its own reading


def _say(key: str, **values: Any) -> dict[str, str]:
    """The sentence in every language; a {en, zh} value is taken in each language."""
    return {lang: text(key, lang, **{k: v[lang] if isinstance(v, dict) else v
                                     for k, v in values.items()}) for lang in LANGS}


def _finite(values: Any) -> list[float]:
    return [float(v) for v in values or [] if isinstance(v, int | float) and math.isfinite(v)]


def _mean_spread(values: list[float], digits: int = 3) -> str:
    """Mean ± spread (half the range over seeds) as the page writes numbers; one value alone."""
    if not values:
        return "—"
    m = sig(mean(values), digits)
    return f"{m} ± {sig(spread(values), 2)}" if len(values) > 1 else m


def label(export: dict, arm: str) -> Text:
    """An arm's words (the reference's with its steps)."""
    steps = (export["per_seed"].get(REFERENCE) or {}).get("steps", "—")
    return arm_words(arm, steps=steps)


def race(per_seed: dict[str, dict]) -> Race:
    """speedrun's Race from export.json's per_seed (one Hit per seed), so the section
    judges an arm by the experiment's own rule."""
    def col(d: dict, key: str) -> list:
        return d.get(key) or [None] * len(d["seed"])

    hits = {arm: [Hit(step, tokens, cpu, total, d["steps"], final) for step, tokens, cpu, total, final
                  in zip(*(col(d, k) for k in ("steps_to_target", "tokens_to_target", "cpu_s_to_target",
                                               "cpu_s_total", "final_val_loss")), strict=True)]
            for arm, d in per_seed.items()}
    first = next(iter(per_seed.values()))
    return Race(first["target"], first["reference_cpu_s"], hits)


def board(export: dict, r: Race) -> list[dict]:
    """The leaderboard: the arms that reach the target in every seed by mean CPU seconds
    to it, then those that reach it in some seeds, then the rest; each with its seeds'
    numbers, their mean and spread (None where no seed reached it)."""
    rows = []
    for arm, hits in r.hits.items():
        cpu, ratio, steps = r.cpu(arm), r.ratios(arm), r.steps(arm)
        per_step = [1000 * h.cpu_total / h.steps for h in hits if h.steps and h.cpu_total]
        rows.append({
            "arm": arm, "label": label(export, arm),
            "role": arm if arm in (REFERENCE, BASELINE) else None,
            "seeds": len(hits), "at_target": len(cpu),
            "cpu_s": [h.cpu_s for h in hits],
            "ratio": [None if h.cpu_s is None else h.cpu_s / r.ref_cpu for h in hits],
            "steps": [h.step for h in hits],
            "cpu_mean": mean(cpu) if cpu else None, "cpu_spread": spread(cpu) if cpu else None,
            "ratio_mean": mean(ratio) if ratio else None,
            "ratio_lo": min(ratio) if ratio else None, "ratio_hi": max(ratio) if ratio else None,
            "steps_mean": mean(steps) if steps else None,
            "steps_spread": spread(steps) if steps else None,
            "ms_per_step": mean(per_step) if per_step else None,
            "final": mean(finals) if (finals := _finite([h.final for h in hits])) else None,
            "pays": None if arm in (REFERENCE, BASELINE) else r.pays(arm)})
    order = lambda row: (0 if row["at_target"] == row["seeds"] else 1 if row["at_target"] else 2,  # noqa: E731
                         row["cpu_mean"] if row["cpu_mean"] is not None else math.inf)
    rows.sort(key=order)
    for i, row in enumerate(rows):
        row["rank"] = i + 1 if row["at_target"] == row["seeds"] else None
    return rows


def curves(export: dict) -> dict | None:
    """The seed-mean validation loss of each arm over its CPU seconds of training, on one
    sorted x axis (None where an arm has no point at that x), and the target. An arm's
    curve is the chart's series with its words (or, where the words changed since the
    export, the series in the arms' order)."""
    chart = next((c for c in export.get("charts", []) if c.get("id") == "val_loss_cpu"), None)
    if chart is None:
        return None
    arms = list(export["per_seed"])
    by_label = {label(export, a)["en"]: a for a in arms}
    lines = chart["series"][:len(arms)]
    named = [by_label.get(s["label"]) for s in lines]
    if None in named or len(set(named)) != len(named):
        named = arms[:len(lines)]
    xs = sorted({x for s in lines for x in s["x"]})
    out = []
    for arm, s in zip(named, lines, strict=True):
        at = dict(zip(s["x"], s["y"], strict=True))
        out.append({"arm": arm, "label": label(export, arm), "color": s.get("color"),
                    "dash": bool(s.get("dash")), "y": [at.get(x) for x in xs]})
    target = next(iter(export["per_seed"].values()))["target"]
    return {"x": xs, "lines": out, "target": target}


def learned(export: dict) -> list[dict]:
    """Each arm's learned values per layer (layers without one left out): the seed mean at
    the first and the last logged step, from the experiment's learned charts."""
    charts = {c.get("id"): c for c in export.get("charts", [])}
    out = []
    for arm in export["per_seed"]:
        for key in LEARNED_KEYS:
            c = charts.get(learned_chart_id(arm, key))
            if c is None:
                continue
            rows = [(int(s["label"].rsplit(" ", 1)[1]), s) for s in c["series"]
                    if s["label"].startswith("layer ") and _finite(s["y"])]
            if not rows:
                continue
            rows.sort(key=lambda r: r[0])
            out.append({"arm": arm, "key": key, "label": label(export, arm),
                        "layers": [i for i, _ in rows],
                        "start": [s["y"][0] for _, s in rows], "end": [s["y"][-1] for _, s in rows],
                        "start_step": rows[0][1]["x"][0], "end_step": rows[0][1]["x"][-1]})
    return out


def key_words(key: str) -> Text:
    """A learned value's name (sr.key.<key>; the key itself where the table has none)."""
    return {lang: text(f"sr.key.{key}", lang) if f"sr.key.{key}" in table(lang) else key
            for lang in LANGS}


# ---- the readings --------------------------------------------------------------------

def board_reading(export: dict, r: Race, rows: list[dict]) -> dict:
    """The fastest arm to the target, its ratio against the goal, and whether it beats the
    course preset by speedrun's rule (beyond the seed spread; with one seed, also in fewer
    steps)."""
    racing = [row for row in rows if row["arm"] != REFERENCE and row["rank"] is not None]
    if not racing:
        return {"text": _say("sr.read.board.none", target=sig(r.target, 4)), "fastest": None}
    best = racing[0]
    base = next((row for row in rows if row["arm"] == BASELINE), None)
    one_seed = best["seeds"] < 2 or (base is not None and base["seeds"] < 2)
    if best["arm"] == BASELINE:
        verdict = _say("sr.read.vs.self")
    elif base is None or base["rank"] is None:
        verdict = _say("sr.read.vs.unreached")
    else:
        values = {"base": _mean_spread(r.cpu(BASELINE)), "steps": _mean_spread(r.steps(best["arm"])),
                  "base_steps": _mean_spread(r.steps(BASELINE))}
        key = ("sr.read.vs.pays" if r.pays(best["arm"]) else "sr.read.vs.within") + (
            ".one" if one_seed else "")
        verdict = _say(key, **values)
    ratio = best["ratio_mean"]
    text_ = _say("sr.read.board", arm=best["label"], cpu=_mean_spread(r.cpu(best["arm"])),
                 ratio=_mean_spread(r.ratios(best["arm"]), 2), goal=sig(GOAL, 2),
                 met=_say("sr.read.met" if ratio <= GOAL else "sr.read.missed"), verdict=verdict)
    return {"text": text_, "fastest": best["arm"], "ratio": ratio, "pays": bool(best["pays"])}


def pay_reading(export: dict, r: Race) -> dict:
    """Which switches, each alone, pay at this scale by speedrun's rule and which do not."""
    switches = [a for a in r.hits if a not in (REFERENCE, BASELINE, BEST)]
    paid = [a for a in switches if r.pays(a)]
    unpaid = [a for a in switches if not r.pays(a)]
    names = lambda xs: joined([label(export, a) for a in xs]) if xs else _say("sr.read.nothing")  # noqa: E731
    seeds = min(len(h) for h in r.hits.values())
    note = _say("sr.read.one_seed") if seeds < 2 else _say("sr.read.seeds", seeds=seeds)
    return {"text": _say("sr.read.pay", unpaid=names(unpaid), paid=names(paid), note=note),
            "paid": paid, "unpaid": unpaid}


def curves_reading(export: dict, r: Race, rows: list[dict]) -> dict:
    """How many arms reach the target in every seed, which do not, and the lowest final
    validation loss against the course preset's."""
    racing = [row for row in rows if row["arm"] != REFERENCE]
    done = [row for row in racing if row["rank"] is not None]
    never = [row for row in racing if row["rank"] is None]
    ended = [row for row in racing if row["final"] is not None]
    low = min(ended, key=lambda row: row["final"]) if ended else None
    base = next((row for row in rows if row["arm"] == BASELINE), None)
    values = {"n": len(done), "m": len(racing), "target": sig(r.target, 4),
              "low": low["label"] if low else "—", "loss": sig(low["final"], 4) if low else "—",
              "base": sig(base["final"], 4) if base else "—",
              "never": joined([row["label"] for row in never]) if never else _say("sr.read.nothing")}
    return {"text": _say("sr.read.curves", **values), "lowest": low["arm"] if low else None,
            "reached": len(done)}


def learned_reading(entry: dict) -> dict:
    """One learned value per layer at the end of training against the start: the layers at
    either end and how many grew; for the embedding shortcut, which layers lean on it."""
    name, arm = key_words(entry["key"]), entry["label"]
    start, end, layers = entry["start"], entry["end"], entry["layers"]
    if len(layers) == 1:
        return {"text": _say("sr.read.learned.one", name=name, arm=arm, start=sig(start[0]),
                             end=sig(end[0]), step=entry["end_step"]), "hi": layers[0],
                "lo": layers[0], "up": int(end[0] > start[0])}
    hi = max(range(len(end)), key=lambda i: end[i])
    lo = min(range(len(end)), key=lambda i: end[i])
    up = sum(e > s for s, e in zip(start, end, strict=True))
    key = "sr.read.x0" if entry["key"] == X0_KEY else "sr.read.learned"
    values = {"name": name, "arm": arm, "hi": layers[hi], "vh": sig(end[hi]), "sh": sig(start[hi]),
              "lo": layers[lo], "vl": sig(end[lo]), "sl": sig(start[lo]), "up": up, "n": len(layers),
              "step": entry["end_step"]}
    return {"text": _say(key, **values), "hi": layers[hi], "lo": layers[lo], "up": up}


def learned_id(entry: dict) -> str:
    return f"sr-learned-{entry['arm']}-{entry['key']}"


def section(export: dict) -> dict:
    """Everything the section draws and says, from one speedrun export.json."""
    r = race(export["per_seed"])
    rows = board(export, r)
    found = learned(export)
    readings = {"sr-board": board_reading(export, r, rows), "sr-pay": pay_reading(export, r),
                "sr-curves": curves_reading(export, r, rows)}
    for entry in found:
        entry["id"] = learned_id(entry)
        entry["name"] = key_words(entry["key"])
        readings[entry["id"]] = learned_reading(entry)
    return {"budget": export.get("budget"), "seeds": export.get("seeds"),
            "exported_at": export.get("exported_at"), "target": r.target,
            "reference_cpu_s": r.ref_cpu, "goal": GOAL, "board": rows, "curves": curves(export),
            "learned": found, "readings": readings}
