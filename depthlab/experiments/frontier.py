"""residual-frontier: the designs that change the residual line `x = x + F(x)` (the
lesson's C8 and C15), trained side by side on the course model at 12 and 48 layers.

Every arm is the course model (Pre-RMSNorm, SwiGLU, RoPE, warmup) with one switch
changed, except the two Post-LN arms, which train without warmup: DeepNorm, and plain
Post-LN as the failing reference of the lesson's C8 point ("DeepNorm trains Post-LN at
48 layers without warmup, where plain Post-LN fails"). Adding a design is one line in
ARMS. The analysis reports validation loss with its seed spread beside the unigram and
bigram baselines of the same tokens, the stream RMS after each write and the gradient of
each block (at init and after training) from the runs' probe lines, time per step from an
interleaved benchmark (frontier_timing), and the learned mixing matrices / depth weights
read from the trained checkpoints (frontier_learned). A difference between arms is
claimed only beyond the seed spread.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from depthlab.config import Config
from depthlab.errors import ConfigError, UserError
from depthlab.experiments import frontier_timing
from depthlab.experiments.baselines import baselines
from depthlab.experiments.frontier_arms import (  # noqa: F401 (the arms are this experiment's)
    ARM_BY_NAME,
    ARM_NAMES,
    ARMS,
    C8_PAIR,
    C8_SETTING,
    REFERENCE,
    STREAM_ARMS,
    Arm,
    arm_name,
    split_arm,
)
from depthlab.experiments.frontier_report import build_report
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

QUICK_STEPS = 100  # steps of every quick run (estimated_seconds keeps quick in its bound)

# Seconds of one core per (layer x training step) of the course model at batch 16 x 64,
# evaluations, probes and checkpoints included, measured as process CPU time on the 2-core
# lab machine under load: 48 layers x 100 steps of plain Post-LN in 172 s (0.036), 81 steps
# of another 48-layer run in 127 s (0.033), and three 12-layer runs of 100 steps plus their
# benchmark and analysis in 149 s (0.037 per layer-step of runs and benchmark calls). The
# residual experiment's quick budget gave 0.033. The n = 4 stream arms are counted at
# STREAM_COST, the bound on their time per step.
LAYER_STEP_S = 0.036
STREAM_COST = 1.3
QUICK_LIMIT_S = 15 * 60


@dataclass(frozen=True)
class Plan:
    """What one budget runs: (depth, arms, steps) per depth, and the benchmark's size."""

    depths: tuple[tuple[int, tuple[str, ...], int], ...]
    timing_rounds: int
    timing_calls: int


def plan(budget: Budget) -> Plan:
    """quick affords the 12-layer stack for the designs and 48 layers for the C8 pair
    only (estimated_seconds keeps it under QUICK_LIMIT_S); the others run every arm at
    both depths (micro shrinks them to 3 and 6 layers for tests)."""
    if budget.name == "quick":
        shallow = tuple(a for a in ARM_NAMES if a not in C8_PAIR)
        return Plan(((budget.deep, shallow, QUICK_STEPS), (budget.deepest, C8_PAIR, QUICK_STEPS)),
                    timing_rounds=5, timing_calls=2)
    rounds, calls = (2, 1) if budget.name == "micro" else (budget.timing_rounds, 3)
    return Plan(((budget.deep, ARM_NAMES, budget.steps), (budget.deepest, ARM_NAMES, budget.steps)),
                rounds, calls)


def arm_config(base: Config, arm: Arm, depth: int, steps: int) -> Config:
    try:
        cfg = with_steps(variant(base, f"model.n_layers={depth}", *arm.overrides), steps)
        return cfg if arm.warmup else variant(cfg, "train.warmup_steps=0")
    except ConfigError as e:
        raise UserError(f"residual-frontier arm {arm.name!r} ({' '.join(arm.overrides)}) is "
                        f"not available in this build: {e}") from None


def grid(base: Config, budget: Budget, seeds: Seeds,
         only: Collection[str] | None = None) -> list[RunSpec]:
    """Every arm of the budget's plan (or the named subset `only`), each over `seeds`."""
    unknown = sorted(set(only or ()) - set(ARM_NAMES))
    if unknown:
        raise UserError(f"unknown residual-frontier arm(s) {', '.join(unknown)}; "
                        f"choose from: {', '.join(ARM_NAMES)}")
    arms = []
    for depth, names, steps in plan(budget).depths:
        for name in names:
            if only is not None and name not in only:
                continue
            arm = ARM_BY_NAME[name]
            arms.append((arm_name(depth, name), f"{arm.label}, {depth} layers",
                         arm_config(base, arm, depth, steps)))
    return specs_over_seeds(arms, seeds)


def estimated_seconds(p: Plan, seeds: int) -> float:
    """CPU seconds of one core for a plan's runs and its benchmark: LAYER_STEP_S per layer
    and step (STREAM_COST times that for the n = 4 stream arms); a benchmark call counts
    as a training step of the first depth for every arm of that depth."""
    cost = lambda names: sum(STREAM_COST if n in STREAM_ARMS else 1.0 for n in names)
    runs = sum(depth * steps * cost(names) * seeds for depth, names, steps in p.depths)
    depth, names, _ = p.depths[0]
    bench = (p.timing_rounds * p.timing_calls + 1) * depth * cost(names)  # + 1: warm-up
    return LAYER_STEP_S * (runs + bench)


# --- analysis ------------------------------------------------------------------------

def analyze(results: list[RunResult], budget: Budget) -> Report:
    """Measure what the logs do not hold (baselines, the benchmark, the learned
    structures), then build the report; the page's data go to frontier.json beside
    export.json."""
    from depthlab.experiments import frontier_learned

    base = baselines(results[0].spec.cfg)
    p = plan(budget)
    depth = p.depths[0][0]
    bench_specs = {split_arm(r.spec.arm)[1]: r.spec.cfg for r in results
                   if split_arm(r.spec.arm)[0] == depth and r.spec.seed == results[0].spec.seed}
    timing = frontier_timing.time_arms(bench_specs, rounds=p.timing_rounds, calls=p.timing_calls)
    learned = frontier_learned.read_runs(
        [r for r in results if split_arm(r.spec.arm)[1] in frontier_learned.LEARNED_ARMS])
    report, data = build_report(results, base, timing, learned, budget.name)
    frontier_learned.write_page_data(results[0].run_dir.parent.parent, data)
    return report


EXPERIMENT = Experiment(
    "residual-frontier",
    ("model.residual", "model.placement", "model.norm", "model.norm_scale", "model.value_residual",
     "model.streams", "model.n_layers", "model.scaled_init", "train.warmup_steps", "train.lr"),
    grid, analyze)
