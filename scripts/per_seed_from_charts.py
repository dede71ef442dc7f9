"""Give an export.json written before exports carried `per_seed` the per-seed final
losses its rule sentences need, recovered exactly from its own chart, then render those
sentences again (Experiment.reword):

    python scripts/per_seed_from_charts.py docs/results/residual.export.json ...

A chart of final loss over a grid (residual's depth chart, norm-placement's lr chart)
draws, per point, the seed mean and the band from the lowest to the highest seed. With
three seeds that determines all three: lowest, highest and 3 x mean - lowest - highest.
Which seed ended where is not recorded, so `seed` is null; every run is taken as
completed (the exports were made from grids that finished: a run that failed by
divergence has no eval after its last finite one, and none is missing here). Exports
of other seed counts are refused: two numbers do not determine more values.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from depthlab.experiments import get_experiment
from depthlab.experiments.placement import HIGH_LR, arm_name
from depthlab.experiments.spec import BUDGETS
from depthlab.rundir import atomic_write_text

SEEDS = 3


def three(mean: float, lo: float, hi: float) -> list[float]:
    mid = SEEDS * mean - lo - hi
    if not lo - 1e-9 <= mid <= hi + 1e-9:
        raise ValueError(f"mean {mean}, band {lo}..{hi}: not three seeds")
    return [lo, mid, hi]


def runs(values: list[float], steps: int) -> dict:
    return {"seed": [None] * SEEDS, "final_val_loss": values, "completed": [True] * SEEDS,
            "steps": steps}


def per_seed(export: dict) -> dict[str, dict]:
    steps = BUDGETS[export["budget"]].steps
    charts = {c["id"]: c for c in export["charts"]}
    out = {}
    if export["experiment"] == "residual":
        for s in charts["depth"]["series"][:2]:
            res = "plain" if s["label"] == "residual" else "none"
            for d, m, lo, hi in zip(s["x"], s["y"], s["lo"], s["hi"], strict=True):
                out[f"L{d}-{res}"] = runs(three(m, lo, hi), steps)
    elif export["experiment"] == "norm-placement":
        for s in charts["lr"]["series"][:4]:
            placement, warm = s["label"].split("-Norm, ")
            warmup = "warmup" if warm == "warmup" else "nowarmup"
            for x, m, lo, hi in zip(s["x"], s["y"], s["lo"], s["hi"], strict=True):
                lr = float(f"{x / 1000:.6g}")
                out[arm_name(placement.lower(), warmup, lr, HIGH_LR)] = runs(three(m, lo, hi),
                                                                            steps)
    else:
        raise ValueError(f"{export['experiment']}: no chart of final losses to recover from")
    return out


def main() -> int:
    for path in map(Path, sys.argv[1:]):
        export = json.loads(path.read_text(encoding="utf-8"))
        if BUDGETS[export["budget"]].seeds != SEEDS:
            print(f"{path}: budget {export['budget']} is not of {SEEDS} seeds", file=sys.stderr)
            return 2
        export["per_seed"] = per_seed(export)
        export["conclusions"] = get_experiment(export["experiment"]).reword(export)
        atomic_write_text(path, json.dumps(export, ensure_ascii=False, allow_nan=False, indent=1))
        print(f"{path}: per_seed for {len(export['per_seed'])} arms; rule sentences rendered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
