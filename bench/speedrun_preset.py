"""`--preset speedrun` against nanoGPT's CPU recipe: CPU-seconds to the recipe's loss,
side by side in one run.

Starts two processes at once, one thread each: the reference loop (nanoGPT's model and
CPU recipe, depthlab.experiments.reference_gpt, 2,000 steps, as the speedrun experiment
trains it) and the command a learner types, `depthlab train --preset speedrun`. Both
read the same split of the bundled Shakespeare and are scored on the same validation
windows, so the reference's final validation loss is the target; the preset's time to
target is the process CPU time of its optimizer steps up to its first evaluation at or
below it (the train lines' `cpu_s`, evaluation left out, as the experiment counts it).
The preset is evaluated every --eval-every steps (10; the preset itself evaluates every
50): the time is read at the first evaluation under the target, so sparse evaluations
overstate it by up to their interval. Evaluating more often changes no weight of the run
(tests/test_train.py), and evaluations take no part in the CPU time.
Running both at once puts whatever else loads the machine on both alike. With several
seeds the pairs run one after another and the ratio is printed per seed and as a mean.
The issue's goal: at most 0.35x.

    python bench/speedrun_preset.py [--seeds 3 | 0,1,2] [--preset speedrun] [--eval-every 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from depthlab.errors import UserError
from depthlab.experiments import speedrun
from depthlab.experiments.spec import (
    BUDGETS,
    RunResult,
    RunSpec,
    base_config,
    parse_seeds,
    seed_list,
    seeded,
)
from depthlab.metrics import read_metrics
from depthlab.presets import get_preset
from depthlab.rundir import read_config

STANDARD = BUDGETS["standard"]


def reference_config(seed: int):
    return seeded(speedrun.reference_config(base_config(STANDARD), STANDARD), seed)


def child_reference(run_dir: str, seed: int) -> None:
    """The reference's process: train it into run_dir (called as `--child DIR SEED`)."""
    speedrun.train_reference(reference_config(seed), Path(run_dir))


def result(run_dir: Path, cfg=None) -> RunResult:
    """A finished run as the experiment reads it; its config is the one it recorded unless
    given (the command line set its seed and evaluation interval)."""
    cfg = read_config(run_dir)[0] if cfg is None else cfg
    return RunResult(RunSpec(run_dir.name, cfg.train.seed, cfg, run_dir.name), run_dir,
                     read_metrics(run_dir))


def race(preset: str, seed: int, work: Path,
         eval_every: int) -> tuple[float, speedrun.Hit, float]:
    """(the reference's CPU-s, the preset's hit of the target, the target)."""
    ref_dir, arm_dir = work / f"reference-s{seed}", work / f"{preset}-s{seed}"
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs = [
        subprocess.Popen([sys.executable, __file__, "--child", str(ref_dir), str(seed)],
                         env=env),
        subprocess.Popen([sys.executable, "-m", "depthlab", "train", "--preset", preset,
                          "--out", str(arm_dir), "--threads", "1", "--no-progress",
                          "--set", f"train.seed={seed}",
                          "--set", f"train.eval_every={eval_every}"], env=env,
                         stdout=subprocess.DEVNULL),
    ]
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"{p.args[:4]} failed with exit status {p.returncode}")
    ref = result(ref_dir, reference_config(seed))
    target = ref.final_val_loss
    ref_cpu = speedrun.hit(ref, target).cpu_total
    arm = result(arm_dir)
    return ref_cpu, speedrun.hit(arm, target), target



def seeds_arg(text: str) -> tuple[int, ...]:
    """--seeds as every experiment reads it (depthlab.experiments.spec.parse_seeds)."""
    try:
        return seed_list(parse_seeds(text))
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child_reference(sys.argv[2], int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default=(0,), type=seeds_arg,
                    help="a count N (seeds 0..N-1) or the seeds, 0,1,2 or 7, (default: seed 0)")
    ap.add_argument("--preset", default="speedrun")
    ap.add_argument("--eval-every", type=int, default=10, metavar="N",
                    help="evaluate the preset every N steps, a multiple of its log_every "
                         "(the time to target is read at an evaluation; default 10)")
    args = ap.parse_args()
    try:
        log_every = get_preset(args.preset).train.log_every
    except UserError as e:
        ap.error(f"--preset: {e}")
    if args.eval_every < 1 or args.eval_every % log_every:
        ap.error(f"--eval-every {args.eval_every}: must be a positive multiple of "
                 f"--preset {args.preset}'s log_every ({log_every}): the CPU time is read "
                 "from the train line at each evaluated step")
    seeds = args.seeds
    load = os.getloadavg()[0]
    ratios = []
    with tempfile.TemporaryDirectory(prefix="speedrun-bench-") as tmp:
        for seed in seeds:
            ref_cpu, h, target = race(args.preset, seed, Path(tmp), args.eval_every)
            if h.cpu_s is None:
                print(f"seed {seed}: target {target:.4f}; --preset {args.preset} does not reach "
                      f"it in {h.steps} steps (final {h.final:.4f})")
                continue
            ratios.append(h.cpu_s / ref_cpu)
            print(f"seed {seed}: target {target:.4f} (the reference's final loss, "
                  f"{ref_cpu:.1f} CPU-s for 2,000 steps); --preset {args.preset} reaches it at "
                  f"step {h.step} (evaluated every {args.eval_every}) in {h.cpu_s:.1f} "
                  f"CPU-s: {ratios[-1]:.3f}x the reference's "
                  f"(goal <= {speedrun.GOAL}x)")
    if len(ratios) > 1:
        print(f"mean {statistics.mean(ratios):.3f}x over {len(ratios)} seeds "
              f"(range {min(ratios):.3f}-{max(ratios):.3f})")
    print(f"load average: {load:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
