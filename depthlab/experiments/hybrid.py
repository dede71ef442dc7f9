"""hybrid: the course model against the same model with Qwen3.5's 3:1 Gated DeltaNet
pattern (model.layer_pattern LLLA: three DeltaNet layers, then one attention layer) and
with a Gated DeltaNet in every layer, on both bundled corpora.

A race on two clocks: validation loss against the tokens trained on (what a mixer learns
from the same data) and against the CPU-seconds of the optimizer steps (`cpu_s` of the
train lines, one thread, evaluation left out: what a learner on a laptop pays). The time
sentence reads each DeltaNet arm's validation loss at the course model's whole CPU
budget, seed by seed, interpolated between its evaluations: the race at equal CPU time.

A DeltaNet layer costs more CPU per token than attention at the course's context of 64
(depthlab.model.deltanet; bench/deltanet_step.py), so the grid's runs train for
`Budget.hybrid_steps` steps where a budget names them (the standard budget: fewer than
its `steps`, so the 18 runs fit in about 45 CPU-minutes).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

from depthlab.config import Config, DataConfig
from depthlab.experiments.analysis import (
    VAL,
    baseline_series,
    by_arm,
    final_values,
    gap_sentence,
    mean_curve,
    per_seed,
)
from depthlab.experiments.baselines import baselines
from depthlab.experiments.report import BLUE, GREEN, PURPLE, chart, compare, fmt, mean, series
from depthlab.experiments.spec import (
    Budget,
    Experiment,
    Report,
    RunResult,
    RunSpec,
    Seeds,
    specs_over_seeds,
    variant,
    with_steps,
)
from depthlab.experiments.speedrun import cpu_at
from depthlab.experiments.wording import Text, phrase, same

CORPORA = ("shakespeare", "hongloumeng")  # the bundled corpora, both raced by default
# (kind, legend, overrides on the course model); the first is the one the others race
KINDS = (
    ("course", "course model (attention in all 4 layers)", ()),
    ("hybrid", "3:1 hybrid (Gated DeltaNet x3, attention x1: LLLA)",
     ("model.mixer=gated_deltanet", "model.layer_pattern=LLLA")),
    ("deltanet", "all Gated DeltaNet (LLLL)", ("model.mixer=gated_deltanet",)),
)
COURSE = KINDS[0][0]
COLORS = {"course": BLUE, "hybrid": GREEN, "deltanet": PURPLE}
# the table's columns (the page translates them, the legends and the corpus cells through
# the `data.*` words of depthlab/locales/<lang>/page.json)
COLUMNS = ("corpus", "mixers", "final val loss", "tokens", "CPU-s of training", "ms per step",
           "tokens/s")


def corpora(base: Config) -> tuple[str, ...]:
    """Both bundled corpora, unless `--corpus` named another one (then that one alone)."""
    named = base.data.corpus
    return CORPORA if named == DataConfig().corpus else (named,)


def corpus_tag(corpus: str) -> str:
    """A bundled corpus by its name, one given as a path by its file's stem: the word run
    folders and chart files are named with."""
    return corpus if corpus in CORPORA else re.sub(r"[^A-Za-z0-9_.-]", "_", Path(corpus).stem)


def arm_name(corpus: str, kind: str) -> str:
    return f"{corpus_tag(corpus)}-{kind}"


def steps_of(budget: Budget) -> int:
    return budget.hybrid_steps or budget.steps


def grid(base: Config, budget: Budget, seeds: Seeds) -> list[RunSpec]:
    """Per corpus, the three mixers on the course model, at the budget's hybrid steps,
    with a train line (and its cpu_s) at every evaluation."""
    base = with_steps(base, steps_of(budget))
    base = replace(base, train=replace(base.train, log_every=math.gcd(
        base.train.log_every, base.train.eval_every)))
    arms = []
    for corpus in corpora(base):
        on_corpus = variant(base, f"data.corpus={corpus}")
        for kind, label, overrides in KINDS:
            arms.append((arm_name(corpus, kind), label, variant(on_corpus, *overrides)))
    return specs_over_seeds(arms, seeds)


def corpus_name(corpus: str) -> Text:
    return phrase(f"hybrid.corpus.{corpus}") if corpus in CORPORA else same(corpus)


def analyze(results: list[RunResult], budget: Budget) -> Report:
    arms = by_arm(results)
    report = Report(per_seed=per_seed(arms))
    report.table["columns"] = list(COLUMNS)
    found = []
    for corpus in dict.fromkeys(r.spec.cfg.data.corpus for r in results):
        kinds = {kind: arms[arm_name(corpus, kind)] for kind, _, _ in KINDS
                 if arm_name(corpus, kind) in arms}
        base = baselines(next(iter(kinds.values()))[0].spec.cfg)
        if report.baselines is None:
            report.baselines = base.to_json()
        found.append(corpus)
        name = corpus_name(corpus)
        report.charts += corpus_charts(corpus, name, kinds, base)
        for runs in kinds.values():
            report.table["rows"].append(table_row(corpus, runs))
        if COURSE not in kinds:
            continue
        for kind, runs in kinds.items():
            if kind == COURSE:
                continue
            report.conclusions.append(gap_sentence(
                phrase("hybrid.what.tokens", corpus=name, tokens=_tokens(runs[0])),
                final_values(kinds[COURSE]), final_values(runs),
                phrase("hybrid.name.course"), phrase(f"hybrid.name.{kind}")))
            report.conclusions.append(time_sentence(name, kind, kinds[COURSE], runs))
    return report


def _tokens(run: RunResult) -> str:
    t = run.spec.cfg.train
    return f"{t.steps * t.batch_size * t.seq_len:,}"


def table_row(corpus: str, runs: list[RunResult]) -> list[str]:
    cpu = [max(cpu_at(r).values()) for r in runs]
    steps = [r.end["step"] if r.end else 0 for r in runs]
    t = runs[0].spec.cfg.train
    ms = [1000 * c / s for c, s in zip(cpu, steps, strict=True) if s]
    rate = [s * t.batch_size * t.seq_len / c for c, s in zip(cpu, steps, strict=True) if c]
    return [corpus, runs[0].spec.label, fmt(final_values(runs)), _tokens(runs[0]),
            fmt_spread(cpu, 1), fmt_spread(ms, 1), fmt_spread(rate, 0)]


def fmt_spread(values: list[float], digits: int) -> str:
    text = f"{mean(values):,.{digits}f}"
    if len(values) > 1:
        text += f" ± {(max(values) - min(values)) / 2:,.{digits}f}"
    return text


def corpus_charts(corpus: str, name: Text, kinds: dict[str, list[RunResult]],
                  base) -> list[dict]:
    """Validation loss (seed means) against tokens and against CPU-seconds of training,
    with the corpus' unigram and bigram baselines."""
    by_tokens, by_cpu = [], []
    for kind, runs in kinds.items():
        label, color = runs[0].spec.label, COLORS.get(kind)
        steps, vals = mean_curve(runs, "eval", "val_loss")
        per_step = runs[0].spec.cfg.train.batch_size * runs[0].spec.cfg.train.seq_len
        by_tokens.append(series(label, [s * per_step for s in steps], vals, color))
        cpus = [cpu_at(r) for r in runs]
        keep = [i for i, s in enumerate(steps) if all(s in c for c in cpus)]
        by_cpu.append(series(label, [mean([c[steps[i]] for c in cpus]) for i in keep],
                             [vals[i] for i in keep], color))
    tokens_end = max((max(s["x"]) for s in by_tokens if s["x"]), default=1)
    cpu_end = max((max(s["x"]) for s in by_cpu if s["x"]), default=1.0)
    return [
        chart(f"val_loss_tokens_{corpus_tag(corpus)}", phrase("hybrid.chart.tokens", corpus=name),
              phrase("hybrid.axis.tokens"), VAL, by_tokens + baseline_series([0, tokens_end], base)),
        chart(f"val_loss_cpu_{corpus_tag(corpus)}", phrase("hybrid.chart.cpu", corpus=name),
              phrase("hybrid.axis.cpu"), VAL, by_cpu + baseline_series([0, cpu_end], base)),
    ]


def loss_at_cpu(run: RunResult, cpu_s: float) -> float | None:
    """The run's validation loss at `cpu_s` CPU-seconds of training, linear between its
    evaluations; None when the run had not trained that long (or logged no evaluation)."""
    cpu = cpu_at(run)
    points = sorted((cpu[e["step"]], e["val_loss"]) for e in run.of("eval") if e["step"] in cpu)
    for (c0, v0), (c1, v1) in zip(points, points[1:], strict=False):
        if c0 <= cpu_s <= c1:
            return v0 if c1 == c0 else v0 + (v1 - v0) * (cpu_s - c0) / (c1 - c0)
    if points and math.isclose(points[-1][0], cpu_s):
        return points[-1][1]
    return None


def time_sentence(corpus: Text, kind: str, course: list[RunResult],
                  arm: list[RunResult]) -> Text:
    """The arm's CPU cost per step as a multiple of the course model's, and its validation
    loss at the course model's whole CPU budget (seed by seed, the same seeds), against
    the course model's final loss: a gap is claimed only beyond the seeds' spread."""
    budget = [max(cpu_at(r).values()) for r in course]
    own = [max(cpu_at(r).values()) for r in arm]
    ratio = mean(own) / mean(budget)
    at = [loss_at_cpu(r, b) for r, b in zip(arm, budget, strict=False)]
    names = {"corpus": corpus, "arm": phrase(f"hybrid.name.{kind}"),
             "course": phrase("hybrid.name.course"), "ratio": f"{ratio:.2f}",
             "cpu": f"{mean(budget):.1f}"}
    if any(v is None for v in at):
        return phrase("hybrid.time.short", **names)
    ends = final_values(course)
    gap, real = compare(ends, at)
    note = (phrase("note.one_seed") if len(at) < 2 else
            phrase("note.seeds", seeds=len(at), spread=f"{_noise(ends, at):.4f}"))
    verdict = ("within" if not real else "higher" if gap > 0 else "lower")
    return phrase(f"hybrid.time.{verdict}", **names, at=fmt(at), end=fmt(ends),
                  gap=f"{abs(gap):.4f}", note=note)


def _noise(a: list[float], b: list[float]) -> float:
    return sum((max(v) - min(v)) / 2 for v in (a, b))


EXPERIMENT = Experiment("hybrid", (
    "model.mixer", "model.layer_pattern", "data.corpus", "train.steps", "train.ckpt_every",
    "train.warmup_steps", "train.log_every"), grid, analyze)
