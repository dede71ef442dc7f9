"""`depthlab train`: train a config from scratch into a run directory (also under torchrun).

Exit codes: 0 completed, 130 interrupted (Ctrl-C/SIGTERM; a checkpoint was saved),
3 stopped on a non-finite loss or gradient, 2 a user error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

from depthlab.cli.common import add_config_args, config_from_args, print_json
from depthlab.config import apply_overrides, validate
from depthlab.corpus import corpus_label
from depthlab.errors import UserError
from depthlab.outdir import check_location
from depthlab.threads import TRAIN_HELP as THREADS_HELP


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train", help="train a model from scratch into a run directory",
        description="Train from scratch on a bundled corpus or your own text. Example: "
        "depthlab train --preset course --corpus shakespeare --tokenizer char --steps 500. "
        "Ctrl-C saves a checkpoint; the same command with --resume continues exactly. "
        "Several processes: torchrun --nproc_per_node=2 -m depthlab train ...",
    )
    add_config_args(p)
    p.add_argument("--corpus", help="shakespeare | hongloumeng | a .txt file or folder "
                   "(default: the config's data.corpus)")
    p.add_argument("--tokenizer", choices=("char", "bpe"), help="char or byte-level BPE")
    p.add_argument("--shards", metavar="DIR",
                   help="train on a token shard folder from `depthlab data prepare`, read by "
                   "offset (data.shards; its tokenizer and validation part are the folder's)")
    p.add_argument("--special-token", action="append", dest="special_tokens", metavar="TOKEN",
                   help="a special token the tokenizer keeps as one id, e.g. '<|endoftext|>' "
                   "(repeatable; data.special_tokens)")
    p.add_argument("--steps", type=int, help="optimizer steps (train.steps)")
    p.add_argument("--seed", type=int, help="seed for init and data order (train.seed)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), help="train.device")
    p.add_argument("--threads", type=int, metavar="N",
                   help=f"train.threads: {THREADS_HELP}; under torchrun one per process")
    p.add_argument("--compile", action="store_true", default=None,
                   help="torch.compile the model (train.compile): minutes of compilation "
                   "first; pays off on GPUs, not on the CPUs bench/ measured; falls back to "
                   "eager with a message when compilation fails")
    p.add_argument("--out", metavar="RUN_DIR", help="run directory (default: runs/<name>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its newest readable checkpoint "
                   "(refuses when none is readable; a finished run is left as it is)")
    p.add_argument("--overwrite", action="store_true",
                   help="start afresh in an --out that holds a run depthlab wrote, deleting "
                   "that run (a folder with other files or runs is refused)")
    p.add_argument("--max-steps", type=int, metavar="N",
                   help="stop after N steps of this invocation (resume later)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or lines")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    p.set_defaults(handler=run)


_FLAG_KEYS = {"corpus": "data.corpus", "tokenizer": "data.tokenizer", "shards": "data.shards",
              "steps": "train.steps",
              "seed": "train.seed", "device": "train.device", "threads": "train.threads",
              "compile": "train.compile"}


def resolve(args: argparse.Namespace):  # -> Config
    cfg = config_from_args(args)
    sets = [f"{key}={getattr(args, flag)}" for flag, key in _FLAG_KEYS.items()
            if getattr(args, flag) is not None]
    cfg = apply_overrides(cfg, sets)
    if args.special_tokens:
        cfg = validate(replace(cfg, data=replace(cfg.data,
                                                 special_tokens=tuple(args.special_tokens))))
    return cfg


def default_run_name(args: argparse.Namespace, cfg) -> str:
    """runs/<preset>-<corpus>-<tokenizer>[-overrides]-s<seed>: readable and stable, so
    the same command with --resume finds its run."""
    parts = [args.preset or (("cfg-" + _stem(args.config)) if args.config else
                             args.default_preset),
             *((Path(cfg.data.shards).name or "shards",) if cfg.data.shards else
               (corpus_label(cfg.data.corpus), cfg.data.tokenizer))]
    parts += [o.split("=", 1)[0].rsplit(".", 1)[-1] + "=" + o.split("=", 1)[-1]
              for o in args.overrides]
    parts.append(f"s{cfg.train.seed}")
    name = "-".join(parts)
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)[:120]


def _stem(path: str) -> str:
    return Path(path).stem


def run(args: argparse.Namespace) -> int:
    from depthlab.train import train  # torch: only when the command runs

    if args.max_steps is not None and args.max_steps <= 0:
        raise UserError(f"--max-steps must be > 0, got {args.max_steps}")
    if args.resume and args.overwrite:
        raise UserError("give --resume (continue the run) or --overwrite (replace it), not both")
    if args.shards is not None:
        given = [f for f, v in (("--corpus", args.corpus), ("--tokenizer", args.tokenizer),
                                ("--special-token", args.special_tokens)) if v]
        if given:
            raise UserError(f"--shards trains on the text and tokenizer of its folder; drop "
                            f"{' and '.join(given)} (they were fixed by `depthlab data "
                            "prepare`)")
    cfg = resolve(args)
    out = (check_location(args.out) if args.out is not None
           else Path("runs") / default_run_name(args, cfg))
    if args.resume and not (out / "config.json").exists():
        raise UserError(f"--resume: {out} holds no run to resume (no config.json); "
                        "drop --resume to start it")
    summary = train(cfg, out, resume=args.resume, overwrite=args.overwrite,
                    progress=not args.no_progress, max_steps=args.max_steps)
    if int(os.environ.get("RANK", "0")) != 0:
        return summary.exit_code
    if args.json:
        print_json({"run_dir": str(summary.run_dir), "status": summary.status,
                    "step": summary.step, "steps": summary.steps, "tokens": summary.tokens,
                    "train_loss": summary.train_loss, "val_loss": summary.val_loss,
                    "elapsed_s": summary.elapsed_s, "tokens_per_s": summary.tokens_per_s,
                    "message": summary.message})
    else:
        val = f"{summary.val_loss:.4f}" if summary.val_loss is not None else "-"
        print(f"{summary.status}: step {summary.step}/{summary.steps}, val loss {val}, "
              f"{summary.tokens_per_s:,.0f} tokens/s, run dir {summary.run_dir}")
        if summary.status == "completed" and summary.message:
            print(summary.message)
    if summary.status == "failed":
        print(f"depthlab: error: {summary.message}", file=sys.stderr)
    elif summary.status == "interrupted":
        print(f"depthlab: {summary.message}", file=sys.stderr)
    return summary.exit_code
