"""`depthlab experiment NAME`: the lesson's claims as reproducible grids of runs."""

from __future__ import annotations

import argparse
import shlex
import sys

from depthlab.cli.table import legend, print_lines, table
from depthlab.corpus import load_corpus
from depthlab.errors import UserError
from depthlab.experiments import BUDGETS, EXPERIMENTS, run_experiment
from depthlab.experiments.spec import parse_seeds
from depthlab.outdir import check_location
from depthlab.threads import SMALL_D_MODEL, add_threads_arg, use_threads


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "experiment", help="run one of the lesson's experiments (--list shows them)",
        description="Run an experiment: a grid of training (or init-time) runs that differ in "
        "exactly the named switch. Finished runs are skipped and interrupted ones resume, so "
        "running the same command twice does nothing the second time. Writes DIR/NAME/ with the "
        "run directories, export.json (what the page draws), PNG+SVG charts and summary.md.",
        epilog="Examples: depthlab experiment --list; depthlab experiment residual --budget quick; "
        "for name in $(depthlab experiment --list --names); do ...; done",
    )
    p.add_argument("name", nargs="?", help="experiment name (see --list)")
    p.add_argument("--list", action="store_true", help="list the experiments and their questions")
    p.add_argument("--names", action="store_true",
                   help="with --list: only the names, one per line (for scripts)")
    p.add_argument("--budget", default="quick",
                   help="micro (seconds, tests), quick (minutes; the main job), standard (the "
                   "README's figures), full (a GPU); default: quick")
    p.add_argument("--seeds", default=None, metavar="N|S,S,..",
                   help="seeds of every arm: a count N (seeds 0..N-1) or the seeds themselves, "
                   "0,1,2 or 1000-1002 (one: 7,); default: the budget's count (stream-rms: one seed "
                   "unless they are named)")
    p.add_argument("--out", default="runs", metavar="DIR", help="output folder (default: runs)")
    p.add_argument("--corpus", default=None, metavar="NAME|PATH",
                   help="corpus for training runs (default: shakespeare)")
    p.add_argument("--rerun", action="store_true",
                   help="train again the runs in DIR/NAME that were made with another config "
                   "(without it they are refused, naming the fields that differ)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or lines")
    add_threads_arg(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.names and not args.list:
        raise UserError("--names goes with --list (depthlab experiment --list --names)")
    if args.list and args.names:
        print_lines(list(EXPERIMENTS))
        return 0
    if args.list or not args.name:
        from depthlab.experiments.attn_gate import wide_summary

        print_lines(["experiments:", *table(["name", "question"], [
            (name, exp.question) for name, exp in EXPERIMENTS.items()], left={0, 1}), "",
            "budgets (--budget):", *table(
                ["budget", "steps", "batch x seq", "seeds", "layers", "sweep", "wide pair",
                 "what for"],
                [(n, b.steps, f"{b.batch_size} x {b.seq_len}", b.seeds, f"{b.shallow}, {b.deep}",
                  f"{','.join(map(str, b.depths))} @ {b.sweep_steps or b.steps}",
                  wide_summary(b), b.about)
                 for n, b in BUDGETS.items()], left={0, 6, 7}),
            *legend(("steps", "optimizer steps per training run"),
                    ("batch x seq", "sequences per step x tokens per sequence"),
                    ("seeds", "seeds per arm (--seeds changes it)"),
                    ("layers", "the lesson's shallow and deep model"),
                    ("sweep", "the residual experiment's depths @ its steps per run"),
                    ("wide pair", "attn-gate's wider, longer pair: d, batch x seq @ steps"))])
        if not args.list:
            raise UserError("name an experiment (listed above)")
        return 0
    if args.budget not in BUDGETS:
        raise UserError(f"--budget {args.budget!r} is not one of: {', '.join(BUDGETS)}")

    seeds = None if args.seeds is None else parse_seeds(args.seeds)  # bad text: one line, exit 2
    if args.corpus is not None:  # refused before the experiment's folder and status exist
        load_corpus(args.corpus)

    # Runs go one at a time; each training run applies the rule to its own width, and the
    # init-time measurements are of the lesson's models (one thread by the rule).
    use_threads(args.threads, SMALL_D_MODEL)

    command = "depthlab " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else None
    root = run_experiment(args.name, budget=args.budget, out_dir=check_location(args.out),
                          seeds=seeds,
                          corpus=args.corpus, progress=not args.no_progress, command=command,
                          rerun=args.rerun, threads=args.threads)
    print((root / "summary.md").read_text(encoding="utf-8"))
    return 0
