"""What the analyses share: runs grouped by arm, seed means over steps, the loss
charts every trained experiment draws, and the sentence that claims a gap only when
it exceeds the spread over seeds.
"""

from __future__ import annotations

import math
from collections import defaultdict

from depthlab.experiments.baselines import Baselines
from depthlab.experiments.report import GREY, ORANGE, chart, compare, fmt, mean, series, spread
from depthlab.experiments.spec import RunResult
from depthlab.experiments.wording import Text, phrase

STEP = phrase("axis.step")
VAL = phrase("axis.val_loss")
TRAIN = phrase("axis.train_loss")


def by_arm(results: list[RunResult]) -> dict[str, list[RunResult]]:
    arms: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        arms[r.spec.arm].append(r)
    return dict(arms)


def mean_curve(runs: list[RunResult], kind: str, key: str) -> tuple[list[float], list[float]]:
    """The seed-mean of a logged value over steps (steps every run logged)."""
    per_step: dict[int, list[float]] = defaultdict(list)
    for r in runs:
        for rec in r.of(kind):
            per_step[rec["step"]].append(rec[key])
    steps = sorted(s for s, v in per_step.items() if len(v) == len(runs))
    return steps, [mean(per_step[s]) for s in steps]


def final_values(runs: list[RunResult]) -> list[float]:
    return [r.final_val_loss if r.final_val_loss is not None else math.nan for r in runs]


def per_seed(arms: dict[str, list[RunResult]]) -> dict[str, dict]:
    """export.json's `per_seed`: each arm's seeds, final validation losses (None: none
    logged), whether each run completed, and its planned steps; what a rule applied per
    seed is read from, and rendered again from (Experiment.reword)."""
    return {arm: {"seed": [r.spec.seed for r in runs],
                  "final_val_loss": [r.final_val_loss for r in runs],
                  "completed": [bool(r.end and r.end.get("status") == "completed")
                                for r in runs],
                  "steps": runs[0].spec.cfg.train.steps}
            for arm, runs in arms.items()}


def diverged(runs: list[RunResult]) -> bool:
    return any(r.end and r.end.get("status") == "failed" for r in runs)


def baseline_series(x: list[float], base: Baselines) -> list[dict]:
    """The unigram and bigram baselines as flat dashed lines over x."""
    return [series(f"unigram baseline ({base.unigram:.4f})", x, [base.unigram] * len(x), GREY,
                   dash=True),
            series(f"bigram baseline ({base.bigram:.4f})", x, [base.bigram] * len(x), ORANGE,
                   dash=True)]


def loss_charts(arms: dict[str, list[RunResult]], style: dict[str, tuple[str, bool]],
                base: Baselines) -> list[dict]:
    """Validation and training loss over steps, seed means; the validation chart also
    draws the unigram and bigram baselines of the tokens it is scored on."""
    val, train = [], []
    for arm, runs in arms.items():
        color, dash = style.get(arm, (None, False))
        label = runs[0].spec.label
        val.append(series(label, *mean_curve(runs, "eval", "val_loss"), color, dash))
        train.append(series(label, *mean_curve(runs, "train", "loss"), color, dash))
    end = max(r.spec.cfg.train.steps for runs in arms.values() for r in runs)
    val += baseline_series([0, end], base)
    return [chart("val_loss", phrase("chart.val_loss"), STEP, VAL, val),
            chart("train_loss", phrase("chart.train_loss"), STEP, TRAIN, train)]


def seed_note(seeds: int, noise: float) -> Text:
    """How sure a gap is: the seeds it rests on and their spread (one seed: none)."""
    if seeds < 2:
        return phrase("note.one_seed")
    return phrase("note.seeds", seeds=seeds, spread=f"{noise:.4f}")


def gap_sentence(what: Text, a: list[float], b: list[float], a_name: Text,
                 b_name: Text) -> Text:
    """How b's final losses compare with a's, claimed only beyond the seed spread, and
    seed by seed: in how many of the seeds (same seed, both arms) b ends higher. a and b
    are in seed order, as by_arm gives them."""
    gap, real = compare(a, b)
    names = {"what": what, "a": a_name, "b": b_name, "a_loss": fmt(a), "b_loss": fmt(b)}
    note = seed_note(min(len(a), len(b)), spread(a) + spread(b))
    if len(a) == len(b) >= 2 and all(math.isfinite(v) for v in a + b):
        # the same comparison seed by seed: the lists are in seed order, the same seeds
        note = phrase("note.by_seed", note=note, b=b_name, n=len(a),
                      k=sum(y > x for x, y in zip(a, b, strict=True)))
    if not math.isfinite(gap):
        return phrase("gap.diverged", **names)
    if not real:
        return phrase("gap.within_spread", **names, note=note)
    return phrase("gap.higher" if gap > 0 else "gap.lower", **names, gap=f"{abs(gap):.4f}",
                  note=note)
