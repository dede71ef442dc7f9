"""Run an experiment's grid one run at a time: skip finished runs of the same config,
resume interrupted ones, keep status.json current for the page, then export. One
process per experiment folder (its lock, depthlab.outdir.Claim), one per run directory
(the trainer's); see depthlab.experiments.reuse.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from depthlab.config import diff, flatten
from depthlab.errors import UserError
from depthlab.experiments import reuse
from depthlab.experiments.registry import get_experiment
from depthlab.experiments.report import EXPORT_FILE, write_outputs
from depthlab.experiments.spec import (
    BUDGETS,
    Budget,
    Experiment,
    RunResult,
    RunSpec,
    Seeds,
    base_config,
    now_iso,
    parse_seeds,
    seed_list,
    seeds_text,
)
from depthlab.metrics import MetricsWriter, read_metrics
from depthlab.outdir import (
    RUN,
    Claim,
    check_location,
    clear_run,
    remove_leftovers,
    survey,
    write_marker,
)
from depthlab.progress import Progress
from depthlab.rundir import atomic_write_text, is_leftover, run_contents, write_config

STATUS_FILE = "status.json"


class Status:
    """status.json: what the page polls while an experiment runs."""

    def __init__(self, root: Path, name: str, total: int) -> None:
        self.path = root / STATUS_FILE
        self.state = {"experiment": name, "state": "running", "runs_total": total,
                      "runs_done": 0, "current_run": None, "step": 0, "steps": 0,
                      "updated_at": now_iso(), "message": None}
        self._last_write = 0.0

    def update(self, force: bool = True, **values: object) -> None:
        """Record values; write now, or (force=False) at most every half second."""
        self.state.update(values, updated_at=now_iso())
        if force or time.monotonic() - self._last_write > 0.5:
            atomic_write_text(self.path, json.dumps(self.state))
            self._last_write = time.monotonic()

    @contextmanager
    def recording_the_end(self, on_interrupt: str) -> Iterator[None]:
        """Whatever stops the work inside is written down before it propagates: Ctrl-C
        (or SIGTERM) as interrupted, with `on_interrupt`; an error as failed."""
        try:
            yield
        except KeyboardInterrupt:
            self.update(state="interrupted", message=on_interrupt)
            raise
        except BaseException as e:
            self.update(state="failed", message=f"{type(e).__name__}: {e}")
            raise


def is_finished(run_dir: Path, spec: RunSpec) -> bool:
    """A run is done when its log ends with run_end completed at the target step, or
    failed by divergence (an outcome, not an accident: rerunning would diverge again)."""
    ends = read_metrics(run_dir, "run_end")
    if not ends:
        return False
    end = ends[-1]
    if end.get("status") == "completed":
        return spec.init_only or end.get("step") == spec.cfg.train.steps
    return end.get("status") == "failed" and end.get("diverged") is True


def describe_grid(specs: list[RunSpec]) -> str:
    """The config diff of the grid: the keys that vary and their value in each run."""
    flats = [flatten(s.cfg) for s in specs]
    keys = sorted({k for s in specs[1:] for k in diff(specs[0].cfg, s.cfg)} - {"train.seed"})
    seeds = sorted({s.seed for s in specs})
    lines = [f"{len(specs)} runs; they differ only in: {', '.join(keys) or 'nothing'} "
             f"(and the seed: {', '.join(map(str, seeds))})"]
    for spec, flat in zip(specs, flats, strict=True):
        values = ", ".join(f"{k.split('.', 1)[1]}={flat[k]}" for k in keys)
        kind = "init only" if spec.init_only else f"{spec.cfg.train.steps} steps"
        lines.append(f"  {spec.name:<28} {values}  ({kind})")
    return "\n".join(lines)


def planned_work(spec: RunSpec) -> float:
    """The work a run is planned to do, in tokens x non-embedding parameters (plus
    attention's 2 L T d per token): its training tokens, its evaluations' tokens at a
    third of the cost (forward only); a run measured at init is one batch. The weights of
    the experiment's ETA: a 12-layer run costs about 12 times a 1-layer one, which a time
    per run taken from the first, smallest runs misses. The embedding and the LM head are
    left out: at the course model's width a step's time follows its blocks (dozens of
    small operations each), not the head's one matmul."""
    m, t = spec.cfg.model, spec.cfg.train
    blocks = m.approx_params - m.vocab_size * m.d_model * (2 - m.tie_embeddings) - m.d_model
    per_token = blocks + 2 * m.n_layers * t.seq_len * m.d_model
    if spec.init_only:
        return t.batch_size * t.seq_len * per_token
    evals = t.steps // max(1, t.eval_every) + 1
    return (t.steps * t.batch_size * t.seq_len + evals * t.eval_tokens / 3) * per_token


def init_probe_run(spec: RunSpec, run_dir: Path) -> None:
    """Measure one configuration at initialisation on a fixed batch of the corpus, and
    write it as a run directory whose metric log has a single probe line at step 0."""
    import torch

    from depthlab.model import Transformer
    from depthlab.tokenizer import prepare_data
    from depthlab.train import batches, probe, resolve_config

    data = prepare_data(spec.cfg.data)
    cfg = resolve_config(spec.cfg, data)
    train_cfg = cfg.train
    torch.manual_seed(train_cfg.seed)
    model = Transformer(cfg.model)
    x, y = batches.fixed_batch(data.val, train_cfg.batch_size, train_cfg.seq_len, torch.device("cpu"))

    def measure() -> None:
        write_config(run_dir, cfg, seed=train_cfg.seed, kind="init-probe")
        with MetricsWriter(run_dir) as log:
            log.log("run_start", step=0, steps=0, world_size=1, device="cpu", resumed_from=None)
            log.log("probe", step=0, **probe(model, x, y))
            log.log("run_end", step=0, status="completed", message="measured at initialisation")

    own_run(run_dir, measure)


def own_run(run_dir: Path, make: Callable[[], None]) -> None:
    """Empty run_dir (locked, marked as a run) and let `make` write it from scratch: the
    runs the experiment makes itself rather than through depthlab.train."""
    with Claim(run_dir):
        if survey(run_dir).kind == RUN:
            remove_leftovers(run_dir)
        clear_run(run_dir, "--rerun")
        write_marker(run_dir, RUN)
        make()


def run_experiment(
    name: str,
    *,
    budget: str = "quick",
    out_dir: Path = Path("runs"),
    seeds: Seeds | str | None = None,
    corpus: str | None = None,
    progress: bool = True,
    command: str | None = None,
    echo: bool = True,
    rerun: bool = False,
    threads: int = 0,
) -> Path:
    """Run (or finish) the grid of experiment `name` and export it to out_dir/name.
    `seeds`: a count, the seeds themselves or `--seeds` text (spec.parse_seeds); None:
    the budget's count. A run directory holding another config is refused, or with
    `rerun` trained again. `threads` is each training run's train.threads (0:
    depthlab.threads' rule)."""
    exp = get_experiment(name)
    if budget not in BUDGETS:
        raise UserError(f"unknown budget {budget!r}; choose one of: {', '.join(BUDGETS)}")
    if seeds is not None:
        seeds = parse_seeds(seeds if isinstance(seeds, str) else seeds_text(seeds))
    sizes = BUDGETS[budget]
    specs = exp.grid(base_config(sizes, corpus, threads), sizes, sizes.seeds if seeds is None else seeds)
    root = check_location(out_dir) / name
    cmd = command or f"depthlab experiment {name} --budget {budget}" + (
        f" --seeds {seeds_text(seeds)}" if seeds is not None else "") + (
        f" --corpus {corpus}" if corpus else "")
    settings = {"budget": budget, "seeds": None if seeds is None else list(seed_list(seeds)),
                "corpus": corpus}
    check_experiment_folder(root, name)
    with Claim(root, "experiment folder"):
        stale = reuse.check_grid(specs, root / "runs", rerun)
        say = print if echo else (lambda *a, **k: None)
        say(f"{name}: {exp.question}\nbudget {budget}: {sizes.about}\n{describe_grid(specs)}")
        status = Status(root, name, len(specs))
        status.update()
        trained_now = run_grid(name, specs, root, stale, status, progress, say)
        status.update(state="exporting", runs_done=len(specs), current_run=None)
        # every run is done; the same command exports again
        with status.recording_the_end("interrupted while exporting; run the same command again"):
            export(exp, specs, root, sizes, trained_now, cmd, settings, say)
        status.update(state="done")
    return root


def check_experiment_folder(root: Path, name: str) -> None:
    """DIR/NAME must be missing, empty, or this experiment's folder as depthlab writes it
    (its status.json, experiment.json or export.json names it: a copied export, to be
    measured again, included): never a training run, nor someone's files, which the
    export would overwrite (summary.md, status.json) or sit beside."""
    names = [n for n in run_contents(root) if not is_leftover(n)]
    if names in ([], ["runs"]):  # nothing, or only its runs (each one guards itself)
        return
    for record in (STATUS_FILE, reuse.RECORD_FILE, EXPORT_FILE):
        try:
            data = json.loads((root / record).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("experiment") == name:
            return
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    raise UserError(f"{root}: holds {shown}, which is not a {name!r} experiment folder "
                    "depthlab wrote; choose another --out (nothing was changed)")


def run_grid(name: str, specs: list[RunSpec], root: Path, stale: set[str], status: Status,
             progress: bool, say: Callable[..., None]) -> bool:
    """Train or measure every run not finished yet, one at a time, keeping status.json
    current; whether any run was (re)made. Ctrl-C leaves the status `interrupted`."""
    trained_now = False
    bar = Progress(len(specs), desc=name, unit="run", enabled=progress, each_item=True,
                   weights=[planned_work(s) for s in specs])
    with status.recording_the_end("interrupted; run the same command again to resume"):
        try:
            for i, spec in enumerate(specs):
                run_dir = root / "runs" / spec.name
                status.update(runs_done=i, current_run=spec.name, step=0,
                              steps=0 if spec.init_only else spec.cfg.train.steps)
                if spec.name not in stale and is_finished(run_dir, spec):
                    bar.skip(i + 1)
                    continue
                trained_now = True
                if spec.init_only:
                    init_probe_run(spec, run_dir)
                    bar.report(i + 1, run=f"{spec.name} measured at init")
                    continue
                if spec.trainer is not None:
                    own_run(run_dir, partial(spec.trainer, spec.cfg, run_dir))
                    bar.report(i + 1, run=f"{spec.name} trained by {spec.trainer.__module__}")
                    continue
                train_run(spec, run_dir, f"{name} {i + 1}/{len(specs)} {spec.name}",
                          spec.name in stale, status, bar, i + 1, progress, say)
        finally:
            bar.close()
    return trained_now


def train_run(spec: RunSpec, run_dir: Path, desc: str, stale: bool, status: Status,
              bar: Progress, done: int, progress: bool, say: Callable[..., None]) -> None:
    """Train one run (resuming it unless it is stale), a step bar beside the run bar. Each
    step also moves the run bar (`Progress.within`), so the experiment's time left is
    measured from the first step on and is on every step line, from the first minute."""
    from depthlab.train import train

    steps = Progress(spec.cfg.train.steps, desc=desc, initial=None, enabled=progress,
                     leave=False)

    def on_step(step: int, values: dict) -> None:
        status.update(force=False, step=step)
        bar.within(step / spec.cfg.train.steps)
        steps.report(step, loss=values["loss"], tokens_per_s=values["tokens_per_s"],
                     all_runs=f"all {bar.total} runs {bar.eta_text()}")

    with steps:
        summary = train(spec.cfg, run_dir, resume=not stale, overwrite=stale, progress=False,
                        on_step=on_step)
    bar.report(done, run=f"{spec.name} {summary.status} at step {summary.step}",
               loss=summary.train_loss, val_loss=summary.val_loss,
               tokens_per_s=summary.tokens_per_s)
    if summary.status == "interrupted":
        status.update(state="interrupted", message=summary.message)
        raise KeyboardInterrupt
    if summary.status == "failed":
        say(f"  {spec.name}: {summary.message}")


def export(exp: Experiment, specs: list[RunSpec], root: Path, budget: Budget, trained_now: bool,
           command: str, settings: dict, say: Callable[..., None]) -> None:
    """Analyse the runs and write export.json, charts and summary.md, unless the export
    on disk is already that of this grid."""
    out = root / EXPORT_FILE
    if not trained_now and out.exists() and reuse.recorded_hash(root) == reuse.grid_hash(specs):
        say(f"all {len(specs)} runs were finished; {out} is current")
        return
    results = [RunResult(s, root / "runs" / s.name, read_metrics(root / "runs" / s.name))
               for s in specs]
    write_outputs(root, exp, exp.analyze(results, budget), budget=settings["budget"], command=command,
                  seeds=sorted({s.seed for s in specs}))
    reuse.write_record(root, exp.name, specs, **settings)
    say(f"wrote {out}, {root / 'summary.md'} and charts")
