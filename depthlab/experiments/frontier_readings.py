"""The one-line readings of the page's "beyond" section, computed here and shipped with
frontier.json (its "readings", and each arm's seed "lo" / "hi"): the page fills no
number of its own, it shows these sentences and draws the data.

Each reading is {"text": {"en", "zh"}} plus the value a test reads back (the best arm,
the arms at either end, the source a depth weight favours). The templates are the page's
bx.read.* keys; numbers are written by `depthlab.sigfig.sig`, as the page writes them.
`complete` adds what an older frontier.json lacks when the server reads it, so a file
written before the readings existed still draws with them.
"""

from __future__ import annotations

import math
from typing import Any

from depthlab.locales import LANGS, table, text
from depthlab.sigfig import sig

# profile key of an arm -> (the reading's id stem, its template, a ratio or the last value)
PROFILES = {"stream_rms_trained": ("rms", "bx.read.rms"),
            "grad_per_block_init": ("grad0", "bx.read.grad"),
            "grad_per_block_trained": ("grad1", "bx.read.grad")}


def _finite(values: Any) -> list[float]:
    return [float(v) for v in values or [] if isinstance(v, (int, float)) and math.isfinite(v)]


def _arm(name: str, lang: str) -> str:
    """An arm's short name in `lang` (the experiment's own key where the table has none)."""
    key = f"bx.arm.{name}"
    return text(key, lang) if key in table(lang) else name


def _say(key: str, values: dict[str, Any], arms: tuple[str, ...] = ()) -> dict[str, str]:
    """The sentence in every language; the fields named in `arms` hold arm names."""
    return {lang: text(key, lang, **{k: _arm(v, lang) if k in arms else v
                                     for k, v in values.items()})
            for lang in LANGS}


def seed_range(arm: dict) -> tuple[float | None, float | None]:
    """The lowest and highest finite final loss over seeds (None when there is none)."""
    finals = _finite(arm.get("final_val_loss"))
    return (min(finals), max(finals)) if finals else (None, None)


def _depths(f: dict) -> list[int]:
    return sorted({a["depth"] for a in f["arms"].values()})


def _at(f: dict, depth: int) -> list[dict]:
    return [a for a in f["arms"].values() if a["depth"] == depth]


def loss_reading(f: dict, depth: int) -> dict:
    """The lowest mean final loss at one depth, beside plain's and the baselines."""
    ok = [a for a in _at(f, depth) if a.get("mean") is not None]
    if not ok:
        return {"text": _say("bx.read.loss.none", {"depth": depth}), "best": ""}
    best = min(ok, key=lambda a: a["mean"])  # the first of equals, as listed
    plain = next((a for a in ok if a["arm"] == "plain"), None)
    base = f.get("baselines") or {}
    values = {"depth": depth, "best": best["arm"], "v": sig(best["mean"], 4),
              "s": sig(best.get("spread"), 2), "seeds": "—" if f.get("seeds") is None else f["seeds"],
              "plain": sig(plain["mean"], 4) if plain else "—",
              "ps": sig(plain.get("spread"), 2) if plain else "—",
              "uni": sig(base.get("unigram"), 4), "bi": sig(base.get("bigram"), 4)}
    key = "bx.read.loss" if plain else "bx.read.loss.noplain"
    return {"text": _say(key, values, arms=("best",)), "best": best["arm"]}


def profile_reading(f: dict, depth: int, key: str) -> dict | None:
    """The arms at either end of a profile's statistic at one depth: the top stream's RMS
    (its last value), or the bottom/top gradient ratio (first over last). None when no
    arm has the profile (the page draws no chart)."""
    arms = [a for a in _at(f, depth) if _finite(a.get(key))]
    if not arms:
        return None
    stat = []
    for a in arms:
        v = _finite(a[key])
        value = (v[0] / v[-1] if v[-1] else math.inf) if key.startswith("grad") else v[-1]
        if math.isfinite(value) and value > 0:
            stat.append((a["arm"], value))
    lo = min(stat, key=lambda s: s[1]) if stat else ("—", None)
    hi = max(stat, key=lambda s: s[1]) if stat else ("—", None)
    values = {"depth": depth, "lo": lo[0], "a": sig(lo[1]), "hi": hi[0], "b": sig(hi[1])}
    return {"text": _say(PROFILES[key][1], values, arms=("lo", "hi")), "lo": lo[0], "hi": hi[0]}


def mixing_reading(key: str, entry: dict) -> dict:
    """HC's or mHC's learned mixing matrices: how far rows and columns are from summing to
    1 (0 for doubly stochastic), and the entry farthest from the identity."""
    mixing = entry["mixing"]
    off = 0.0
    far = (0.0, 0, 0, 0)
    for w, e in enumerate(mixing):
        m = e["matrix"]
        sums = [sum(row) for row in m] + [sum(row[j] for row in m) for j in range(len(m[0]))]
        off = max([off, *(abs(s - 1) for s in sums)])
        for i, row in enumerate(m):
            for j, v in enumerate(row):
                d = abs(v - (1 if i == j else 0))
                if d > far[0]:
                    far = (d, w, i, j)
    arm = "-".join(key.split("-")[1:])
    values = {"arm": arm, "writes": len(mixing), "g": sig(entry.get("composite_gain")),
              "off": sig(off, 2), "d": sig(far[0], 3), "w": mixing[far[1]]["name"],
              "i": far[2], "j": far[3]}
    return {"text": _say("bx.read.mix", values, arms=("arm",)), "gain": entry.get("composite_gain")}


def depth_reading(entry: dict) -> dict:
    """AttnRes's last sublayer: which source it weights most, against a uniform weight."""
    last = entry["depth_weights"][-1]
    weights = last["weights"]
    at = weights.index(max(weights))
    values = {"name": last["name"], "k": len(weights), "src": at, "w": sig(weights[at], 3),
              "u": sig(1 / len(weights), 3)}
    return {"text": _say("bx.read.depth", values), "source": at}


def readings(f: dict) -> dict[str, dict]:
    """Every reading of the section, keyed by its element's id without "reading-"."""
    out: dict[str, dict] = {}
    for depth in _depths(f):
        out[f"bx-loss-{depth}"] = loss_reading(f, depth)
        for key, (stem, _) in PROFILES.items():
            r = profile_reading(f, depth, key)
            if r is not None:
                out[f"bx-{stem}-{depth}"] = r
    for key, entry in (f.get("learned") or {}).items():
        if entry.get("mixing"):
            out[f"bx-mix-{key}"] = mixing_reading(key, entry)
        if entry.get("depth_weights"):
            out[f"bx-depth-{key}"] = depth_reading(entry)
    return out


def complete(f: dict) -> dict:
    """frontier.json with its readings and each arm's seed range, computed from its data
    where the file has none (a file written before they were shipped)."""
    if "readings" in f and all("lo" in a for a in f["arms"].values()):
        return f
    arms = {name: {**a, **dict(zip(("lo", "hi"), seed_range(a), strict=True))}
            for name, a in f["arms"].items()}
    done = {**f, "arms": arms}
    done["readings"] = readings(done)
    return done
