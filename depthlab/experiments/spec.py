"""What an experiment is: a grid of runs that differ in exactly the named switches,
at a budget, plus an analysis that turns their metric logs into charts,
a table and conclusions computed from the data. Each experiment is a module of this
package that defines `EXPERIMENT`; depthlab.experiments.registry lists them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from depthlab.config import Config, apply_overrides
from depthlab.errors import UserError
from depthlab.locales import texts
from depthlab.presets import course


@dataclass(frozen=True)
class Budget:
    """How much compute each run of an experiment gets."""

    name: str
    steps: int
    batch_size: int
    seq_len: int
    eval_every: int
    eval_tokens: int
    seeds: int
    shallow: int  # "4 layers" of the lesson
    deep: int  # "12 layers" of the lesson
    deepest: int  # the 48-layer stack of the stream-growth check (init only)
    model: tuple[str, ...] = ()  # extra overrides (micro shrinks the model)
    about: str = ""
    depths: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12)  # the residual depth sweep
    sweep_steps: int | None = None  # steps of the depth sweep's runs (None: `steps`)
    timing_rounds: int = 15  # rounds of the norm-type timing benchmark
    lrs: tuple[float, ...] = (2e-3, 3e-3, 4e-3, 5e-3, 7e-3, 1e-2)  # norm-placement's lr grid
    wide: tuple[str, ...] = ()  # attn-gate's wider, longer pair: its overrides (none: no pair)
    wide_steps: int = 0  # steps of that pair's runs
    real_model: bool = True  # attn-gate measures SmolLM2 beside its runs (imported once)
    hybrid_steps: int | None = None  # steps of the hybrid experiment's runs (None: `steps`)


BUDGETS: dict[str, Budget] = {
    "micro": Budget("micro", steps=4, batch_size=4, seq_len=16, eval_every=2, eval_tokens=256,
                    seeds=1, shallow=2, deep=3, deepest=6,
                    model=("model.d_model=32", "model.n_heads=2", "model.context_len=32"),
                    about="seconds; for tests only: the numbers mean nothing", depths=(1, 2, 3),
                    timing_rounds=2, lrs=(2e-3, 5e-3),
                    wide=("model.d_model=64", "train.seq_len=32"), wide_steps=6,
                    real_model=False),
    # The depth sweep at quick: 12 runs of 1-8 layers at 200 steps cost about as much as
    # the old 4 runs of 4 and 12 layers at 300 (the sum of depths x steps: 9,600 either way);
    # measured: 314 s of CPU time on one thread (/usr/bin/time, 2-core machine).
    "quick": Budget("quick", steps=300, batch_size=16, seq_len=64, eval_every=50,
                    eval_tokens=16384, seeds=1, shallow=4, deep=12, deepest=48,
                    about="minutes on a 2-core laptop; what `depthlab lab` runs",
                    depths=(1, 2, 3, 4, 6, 8), sweep_steps=200, lrs=(5e-3,)),
    "standard": Budget("standard", steps=500, batch_size=16, seq_len=64, eval_every=50,
                       eval_tokens=16384, seeds=3, shallow=4, deep=12, deepest=48,
                       about="the README's figures: 3 seeds; hours for all of them on a "
                       "2-core laptop",
                       # attn-gate's pair at d 256, context 256: 0.6 s of CPU per training step
                       # on one thread, about 0.7 with evaluation and probes (measured: 4 runs
                       # took 1,700 CPU-s), so 6 runs of 600 steps take about 40 CPU-minutes.
                       wide=("model.d_model=256", "train.seq_len=256", "train.batch_size=8"),
                       wide_steps=600,
                       # hybrid's 18 runs (3 mixers x 2 corpora x 3 seeds): a DeltaNet layer's
                       # step costs about 1.5x attention's at context 64 (measured: 0.29 /
                       # 0.43 / 0.43 s a step for the course / 3:1 / all-DeltaNet model on
                       # Shakespeare, one thread), so 300 steps keep them near 45 CPU-minutes
                       hybrid_steps=300),
    "full": Budget("full", steps=5000, batch_size=64, seq_len=256, eval_every=250,
                   eval_tokens=262144, seeds=3, shallow=4, deep=12, deepest=48,
                   about="for a GPU", wide=("model.d_model=256",), wide_steps=10000),
}


@dataclass(frozen=True)
class RunSpec:
    """One run of a grid. `arm` names the cell without the seed; runs of one arm
    differ only in seed."""

    arm: str
    seed: int
    cfg: Config
    label: str  # legend text
    init_only: bool = False  # measured at initialisation, no training
    # trains the run instead of depthlab.train: (config, empty run directory) -> a run
    # directory with the trainer's metric log (the speedrun experiment's reference loop)
    trainer: Callable[[Config, Path], None] | None = None

    @property
    def name(self) -> str:
        return f"{self.arm}-s{self.seed}"


@dataclass
class RunResult:
    spec: RunSpec
    run_dir: Path
    records: list[dict[str, Any]]  # the run's metrics.jsonl

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == kind]

    @property
    def end(self) -> dict[str, Any] | None:
        ends = self.of("run_end")
        return ends[-1] if ends else None

    @property
    def final_val_loss(self) -> float | None:
        evals = self.of("eval")
        return evals[-1]["val_loss"] if evals else None


@dataclass
class Report:
    """What an analysis produces; written as export.json, charts and summary.md."""

    charts: list[dict[str, Any]] = field(default_factory=list)
    table: dict[str, Any] = field(default_factory=lambda: {"columns": [], "rows": []})
    conclusions: list[dict[str, str]] = field(default_factory=list)
    baselines: dict[str, Any] | None = None  # unigram/bigram on the scored tokens
    per_seed: dict[str, dict] | None = None  # analysis.per_seed: what per-seed rules read


@dataclass(frozen=True)
class Experiment:
    """A named grid and its analysis. Its question is the template
    `experiments.<name>.question` of depthlab/locales/<lang>/experiments.json."""

    name: str
    switches: tuple[str, ...]  # the config keys the grid varies
    grid: Callable[[Config, Budget, Seeds], list[RunSpec]]
    analyze: Callable[[list[RunResult], Budget], Report]
    # export.json -> its conclusions, the rule sentences rendered again from `per_seed`
    # (None: the experiment's sentences need the runs themselves)
    reword: Callable[[dict[str, Any]], list[dict[str, str]]] | None = None

    @property
    def questions(self) -> dict[str, str]:
        return texts(f"experiments.{self.name}.question")

    @property
    def question(self) -> str:
        return self.questions["en"]

    @property
    def question_zh(self) -> str:
        return self.questions["zh"]


def base_config(budget: Budget, corpus: str | None = None, threads: int = 0) -> Config:
    """The course model with the budget's training settings: every grid starts here."""
    cfg = course()
    cfg = replace(cfg, train=replace(
        cfg.train, batch_size=budget.batch_size, seq_len=budget.seq_len,
        eval_every=budget.eval_every, eval_tokens=budget.eval_tokens,
        probe_every=budget.eval_every, keep_ckpts=1, threads=threads))
    cfg = with_steps(cfg, budget.steps)
    overrides = list(budget.model)
    if corpus is not None:
        overrides.append(f"data.corpus={corpus}")
    return apply_overrides(cfg, overrides)


def with_steps(cfg: Config, steps: int) -> Config:
    """cfg trained for `steps`, with the schedule that depends on the length (warmup at
    most a tenth of the run, a checkpoint at least every quarter) following it."""
    train_cfg = cfg.train
    return replace(cfg, train=replace(
        train_cfg, steps=steps, ckpt_every=max(train_cfg.eval_every, steps // 4),
        warmup_steps=min(course().train.warmup_steps, steps // 10)))


def variant(cfg: Config, *overrides: str) -> Config:
    return apply_overrides(cfg, list(overrides))


def seeded(cfg: Config, seed: int) -> Config:
    return replace(cfg, train=replace(cfg.train, seed=seed))


# Seeds of a grid: a count n (seeds 0..n-1, the budgets' way) or the seeds themselves
# (`--seeds 7,11,13`), so a learner can check a claim on seeds it was not drawn from.
Seeds = int | tuple[int, ...]
MAX_SEEDS = 10  # runs per arm: a standard grid stays hours, not days
MAX_SEED = 2**32 - 1  # what numpy's seeding accepts (torch takes more)


def seed_list(seeds: Seeds) -> tuple[int, ...]:
    """The seeds themselves: 0..n-1 for a count, a tuple as given."""
    return tuple(range(seeds)) if isinstance(seeds, int) else tuple(seeds)


def at_least(seeds: Seeds, n: int) -> Seeds:
    """A count raised to n (for a grid that needs n seeds to say anything); seeds the
    user named are kept as they are."""
    return max(seeds, n) if isinstance(seeds, int) else seeds


def parse_seeds(text: str) -> Seeds:
    """`--seeds`: "5" is a count (seeds 0-4), "0,1,2" or "7,11" the seeds themselves,
    "1000-1002" a range of them ("7-7" or "7," one chosen seed). UserError otherwise."""
    allowed = (f"give a count 1-{MAX_SEEDS} (3) or seeds 0-{MAX_SEED} separated by commas "
               "or as a range (0,1,2 or 1000-1002)")
    words = text.replace(" ", "")
    if words.isdigit():
        if not 1 <= int(words) <= MAX_SEEDS:
            one = f" (seed {int(words)} alone is {int(words)},)" if int(words) <= MAX_SEED else ""
            raise UserError(f"--seeds {text!r}: a count must be 1-{MAX_SEEDS}{one}; {allowed}")
        return int(words)
    seeds: list[int] = []
    for part in words.split(","):
        if not part and "," in words:
            continue  # "7," names one seed
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise UserError(f"--seeds {text!r}: {part!r} is not a seed; {allowed}")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first or last > MAX_SEED:
            raise UserError(f"--seeds {text!r}: {part!r} is not in 0-{MAX_SEED} (low-high); "
                            f"{allowed}")
        if len(seeds) + last - first + 1 > MAX_SEEDS:
            raise UserError(f"--seeds {text!r}: more than {MAX_SEEDS} seeds; {allowed}")
        seeds += range(first, last + 1)
    if not seeds:
        raise UserError(f"--seeds {text!r}: no seed given; {allowed}")
    if len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds {text!r}: a seed is named twice; {allowed}")
    return tuple(seeds)


def seeds_text(seeds: Seeds) -> str:
    """What parse_seeds reads back as `seeds` ("3"; "7,11"; "7," for one named seed)."""
    if isinstance(seeds, int):
        return str(seeds)
    return ",".join(map(str, seeds)) + ("," if len(seeds) == 1 else "")


def specs_over_seeds(arms: list[tuple[str, str, Config]], seeds: Seeds,
                     init_only: bool = False) -> list[RunSpec]:
    """(arm, label, config) -> one RunSpec per seed (0..seeds-1 for a count)."""
    return [RunSpec(arm, s, seeded(cfg, s), label, init_only)
            for arm, label, cfg in arms for s in seed_list(seeds)]


def now_iso() -> str:
    """The UTC time stamp status.json and export.json carry."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
