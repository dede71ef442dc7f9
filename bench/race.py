"""The race on nanoGPT's ground: CPU-seconds to a fixed validation loss on a text you give,
for nanoGPT's CPU recipe and for depthlab's presets, side by side in one run.

The text is split as nanoGPT's data/shakespeare_char/prepare.py splits it (the first 90%
of its characters train, the rest validate; the vocabulary is every character of the
whole text) and every contender is scored on the same 256 windows of 64 characters drawn
with a fixed seed from the validation split, in nats per character
(depthlab.experiments.speedrun_text). Its time is the process CPU time of its optimizer
steps on one thread, evaluation left out, up to its first evaluation at or below --target.

The reference is nanoGPT's model and CPU recipe (depthlab.experiments.reference_gpt: 4
layers, d 128, 4 heads, context 64, batch 12, AdamW lr 1e-3 to 1e-4, betas 0.9/0.99,
weight decay 0.1, 100 warmup iterations, clip 1.0, dropout 0) with nanoGPT's get_lr over
a --ref-iters schedule (3,000). A preset trains as `depthlab train --preset NAME` trains
it (depthlab.train.train, its own schedule, batch and optimizer) on the same split. Both
stop at the target; evaluating (every --eval-every steps within 0.15 of the target, every
5 x --eval-every steps before) changes no weight. The run that gave docs/speed.md's race B
figures (one seed of three contenders) took about an hour of wall time at load 13.

Contenders run --jobs at a time (2: two processes, one thread each), queued seed by seed
so that whatever else loads the machine falls on all of them alike. Each preset's ratio
is its CPU-s over the reference's of the same seed; the mean and range are printed.
This is not docs/speed.md's other figure (the re-stated reference's own final loss on
the bundled plays as the target, its whole 2,000 steps as the denominator).

    python bench/race.py [--text data/shakespeare_char/input.txt] [--target 1.90]
                         [--presets speedrun,course] [--seeds 0,1,2] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from depthlab.errors import UserError
from depthlab.experiments import speedrun_text as st
from depthlab.experiments.spec import parse_seeds, seed_list

REFERENCE = "reference"
RECIPE = {"lr": 1e-3, "min_lr": 1e-4, "warmup": 100, "batch": 12, "context": 64,
          "layers": 4, "d": 128, "heads": 4, "weight_decay": 0.1, "betas": (0.9, 0.99),
          "clip": 1.0}
NEAR = 0.15  # evaluate every --eval-every steps once within this of the target
COARSE = 5  # before that, every COARSE x --eval-every steps


def load_split(text: str | None) -> tuple[st.Split, str, str]:
    """(the split, the corpus spec the trainer reads, the text's name): the file given,
    or depthlab's bundled plays."""
    from depthlab.corpus import load_corpus

    if text is None:
        corpus = load_corpus("shakespeare")
        return st.nanogpt_split(corpus.text, "the bundled plays"), "shakespeare", "bundled plays"
    path = Path(text)
    raw = st.read_text(path)
    return st.nanogpt_split(raw, f"--text {path}"), str(path.resolve()), str(path)


# --- the contenders, each in its own process ------------------------------------------

def run_reference(job: dict) -> dict:
    """nanoGPT's recipe on the split, scored on the fixed windows; stops at the target."""
    import torch
    import torch.nn.functional as F

    from depthlab.config import Config, TrainConfig
    from depthlab.experiments.reference_gpt import RefGPT, recipe_optimizer
    from depthlab.train import batches
    from depthlab.train.runtime import keep_freed_memory

    split, _, _ = load_split(job["text"])
    x_val, y_val = st.window_batch(split.val, st.fixed_windows(len(split.val)))
    r, seed, iters = RECIPE, job["seed"], job["ref_iters"]
    keep_freed_memory()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = RefGPT(split.vocab_size, r["context"], r["d"], r["layers"], r["heads"])
    opt = recipe_optimizer(model, Config(train=TrainConfig(
        lr=r["lr"], weight_decay=r["weight_decay"], beta1=r["betas"][0], beta2=r["betas"][1])))
    when = st.Schedule(job["eval_every"], COARSE * job["eval_every"], NEAR, job["target"])
    cpu, evals = 0.0, []
    cpu_dev = torch.device("cpu")
    for it in range(iters):
        c0 = time.process_time()
        lr = st.nanogpt_lr(it, r["lr"], r["min_lr"], r["warmup"], iters)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = batches.train_batch(split.train, seed, it, 0, r["batch"], r["context"], 0, 1, cpu_dev)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), r["clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        cpu += time.process_time() - c0
        done = it + 1
        if when.due(done) or done == iters:
            val = st.score(model, x_val, y_val)
            when.scored(val)
            evals.append((done, cpu, val))
            if val <= job["target"]:
                break
    return {"evals": evals, "cpu_total": cpu, "steps": done, "resolution": when.resolution}


def preset_config(name: str, overrides: list[str]):
    """The preset as `depthlab train --preset NAME --set ...` reads it."""
    from depthlab.config import apply_overrides
    from depthlab.presets import get_preset

    return apply_overrides(get_preset(name), list(overrides))


class Reached(Exception):
    """Raised from the trainer's on_step at the target: the run has done its part."""


def run_preset(job: dict) -> dict:
    """`depthlab train --preset NAME` on the split (the race's token cache), one thread,
    scored on the fixed windows from on_step, stopped at the target. The trainer's own
    evaluation, probes and checkpoints run only at its start and end."""
    import torch
    from torch.nn.modules.module import register_module_forward_pre_hook

    from depthlab.metrics import read_metrics
    from depthlab.model import Transformer
    from depthlab.train import train

    split, _, _ = load_split(job["text"])
    x_val, y_val = st.window_batch(split.val, st.fixed_windows(len(split.val)))
    cfg = preset_config(job["contender"], job.get("set", []))
    steps = cfg.train.steps
    cfg = replace(cfg, data=replace(cfg.data, corpus=job["corpus"], tokenizer="char"),
                  train=replace(cfg.train, seed=job["seed"], threads=1, eval_every=steps,
                                probe_every=steps, ckpt_every=steps,
                                log_every=job["eval_every"]))
    when = st.Schedule(job["eval_every"], COARSE * job["eval_every"], NEAR, job["target"])
    # The trainer hands on_step no model: a one-shot hook on every module's call takes it
    # at its first forward (the step-0 evaluation, before any timed step) and removes
    # itself, so no timed step runs with a global hook set.
    model: list[torch.nn.Module] = []

    def take(module, _args):
        if isinstance(module, Transformer) and not model:
            model.append(module)
            handle.remove()

    handle = register_module_forward_pre_hook(take)
    scores: dict[int, float] = {}

    def on_step(step: int, _values: dict) -> None:
        if when.due(step) or step == steps:
            scores[step] = st.score(model[0], x_val, y_val)
            when.scored(scores[step])
            if scores[step] <= job["target"]:
                raise Reached

    run_dir = Path(job["work"]) / f"{job['contender']}-s{job['seed']}"
    try:
        train(cfg, run_dir, progress=False, on_step=on_step, cache_root=Path(job["cache"]))
    except Reached:
        pass
    finally:
        handle.remove()
    cpu, total = {}, 0.0
    for rec in read_metrics(run_dir):
        if rec.get("kind") == "train":
            total += rec["cpu_s"]
            cpu[rec["step"]] = total
    evals = [(s, cpu[s], v) for s, v in sorted(scores.items())]
    return {"evals": evals, "cpu_total": total, "steps": max(cpu, default=0),
            "resolution": when.resolution}


def child(job_file: str, out_file: str) -> None:
    job = json.loads(Path(job_file).read_text())
    result = (run_reference if job["contender"] == REFERENCE else run_preset)(job)
    tmp = Path(out_file + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out_file)


# --- the race ---------------------------------------------------------------------------

def run_all(jobs: list[dict], work: Path, n_jobs: int) -> list[dict]:
    """Each job in its own process, n_jobs at a time, in the order given."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    pending, running, results = list(enumerate(jobs)), [], [None] * len(jobs)
    while pending or running:
        while pending and len(running) < n_jobs:
            i, job = pending.pop(0)
            jf, of = work / f"job{i}.json", work / f"out{i}.json"
            jf.write_text(json.dumps(job))
            running.append((i, of, subprocess.Popen(
                [sys.executable, __file__, "--child", str(jf), str(of)], env=env)))
        time.sleep(0.5)
        for entry in list(running):
            i, of, p = entry
            if p.poll() is None:
                continue
            running.remove(entry)
            if p.returncode != 0:
                for _, _, q in running:
                    q.kill()
                raise SystemExit(f"{jobs[i]['contender']} seed {jobs[i]['seed']} failed with "
                                 f"exit status {p.returncode}")
            results[i] = json.loads(of.read_text())
            c = st.crossing([tuple(e) for e in results[i]["evals"]], jobs[i]["target"])
            where = (f"step {c.step}, {c.cpu_s:.1f} CPU-s" if c.step is not None else
                     f"not reached in {c.last_step} steps")
            print(f"  done: {jobs[i]['contender']} seed {jobs[i]['seed']}: {where}", flush=True)
    return results


def spread(values: list[float], fmt: str) -> str:
    if len(values) == 1:
        return format(values[0], fmt)
    return (f"mean {format(statistics.mean(values), fmt)} "
            f"(range {format(min(values), fmt)}-{format(max(values), fmt)})")


def report(jobs: list[dict], results: list[dict], contenders: list[str],
           seeds: tuple[int, ...], target: float) -> dict:
    table: dict[str, dict[int, st.Crossing]] = {c: {} for c in contenders}
    rows: dict[str, dict] = {}
    for job, res in zip(jobs, results, strict=True):
        c = st.crossing([tuple(e) for e in res["evals"]], target)
        table[job["contender"]][job["seed"]] = c
        rows.setdefault(job["contender"], {})[job["seed"]] = {
            "step": c.step, "cpu_s": c.cpu_s, "loss": c.loss, "steps": res["steps"],
            "cpu_total": res["cpu_total"], "resolution": res["resolution"],
            "ms_per_step": 1000 * res["cpu_total"] / max(res["steps"], 1)}
    ref = table[REFERENCE]
    out = {"target": target, "contenders": rows, "ratios": {}}
    for name in contenders:
        line = []
        for s in seeds:
            c, row = table[name][s], rows[name][s]
            if c.step is None:
                line.append(f"seed {s} not reached ({c.last_step} steps, last {c.last_loss:.4f})")
                continue
            coarse = f", read at {row['resolution']}-step resolution" if row["resolution"] > 1 and (
                row["resolution"] != jobs[0]["eval_every"]) else ""
            line.append(f"seed {s} step {c.step} {c.cpu_s:.1f} CPU-s ({row['ms_per_step']:.0f} "
                        f"ms/step{coarse})")
        print(f"{name}: " + "; ".join(line))
        if name == REFERENCE:
            continue
        ratios = [table[name][s].cpu_s / ref[s].cpu_s for s in seeds
                  if table[name][s].step is not None and ref[s].step is not None]
        out["ratios"][name] = ratios
        if ratios:
            per = ", ".join(f"{r:.3f}x" for r in ratios)
            print(f"  {name} / reference: {per}; {spread(ratios, '.3f')}x over {len(ratios)} "
                  f"of {len(seeds)} seeds")
    return out


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--text", metavar="PATH", default=None,
                    help="a UTF-8 text file, e.g. nanoGPT's data/shakespeare_char/input.txt "
                         "(default: depthlab's bundled plays)")
    ap.add_argument("--target", type=float, default=1.90,
                    help="validation loss to reach, nats per character (default 1.90)")
    ap.add_argument("--presets", default="speedrun,course",
                    help="comma-separated presets to race against the reference "
                         "(default speedrun,course)")
    ap.add_argument("--seeds", default="3",
                    help="a count N (seeds 0..N-1) or the seeds, 0,1,2 (default 3)")
    ap.add_argument("--jobs", type=int, default=2,
                    help="contenders trained at once, one thread each (default 2)")
    ap.add_argument("--eval-every", type=int, default=10, metavar="N",
                    help=f"score every N steps within {NEAR} of the target, every {COARSE}N "
                         "before (default 10)")
    ap.add_argument("--ref-iters", type=int, default=3000, metavar="N",
                    help="the reference's schedule: nanoGPT's max_iters = lr_decay_iters "
                         "(default 3000)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="train every preset with this override too, as `depthlab train "
                         "--set` does (repeatable), e.g. train.steps=500 to try a schedule")
    ap.add_argument("--json", metavar="PATH", help="also write the numbers to this file")
    args = ap.parse_args()
    try:
        target = st.check_target(args.target)
        seeds = seed_list(parse_seeds(args.seeds))
        presets = [p.strip() for p in args.presets.split(",") if p.strip()]
        for p in presets:
            preset_config(p, args.set)
        if not presets:
            raise UserError("--presets: name at least one preset")
        for flag, value in (("--jobs", args.jobs), ("--eval-every", args.eval_every),
                            ("--ref-iters", args.ref_iters)):
            if value < 1:
                raise UserError(f"{flag} {value}: must be at least 1")
        split, corpus, name = load_split(args.text)
    except UserError as e:
        sys.exit(f"error: {e}")
    from depthlab.corpus import load_corpus

    contenders = [REFERENCE, *presets]
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="race-") as tmp:
        work = Path(tmp)
        st.write_cache(work / "cache", corpus, load_corpus(corpus).sha256, split)
        jobs = [{"contender": c, "seed": s, "text": args.text, "corpus": corpus,
                 "target": target, "eval_every": args.eval_every, "ref_iters": args.ref_iters,
                 "set": args.set, "cache": str(work / "cache"), "work": str(work)}
                for s in seeds for c in contenders]
        print(f"text: {name} ({len(split.train) + len(split.val):,} characters, vocabulary "
              f"{split.vocab_size}; train {len(split.train):,}, val {len(split.val):,}); "
              f"target {target}; {st.WINDOWS} windows x {st.WINDOW} characters; reference: "
              f"nanoGPT's CPU recipe, {args.ref_iters:,}-iteration schedule; {args.jobs} at "
              f"a time, one thread each"
              + (f"; presets trained with --set {' '.join(args.set)}" if args.set else ""),
              flush=True)
        results = run_all(jobs, work, args.jobs)
    out = report(jobs, results, contenders, seeds, target)
    print(f"load average: {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    if args.json:
        out.update(text=name, characters=len(split.train) + len(split.val),
                   date=time.strftime("%Y-%m-%d"), load=[load, os.getloadavg()[0]])
        Path(args.json).write_text(json.dumps(out, indent=1))
    if any(math.isnan(r) for rs in out["ratios"].values() for r in rs):
        sys.exit(1)


if __name__ == "__main__":
    main()
