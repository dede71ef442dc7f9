"""The training loop: one function, `train`, that turns a Config into a run directory.

Step numbers count finished optimizer steps: step 0 is the model at init, step
N the model after N updates. Everything a later step depends on (weights,
optimizer, the step itself) is in each checkpoint, and the data a step reads is
a function of (seed, step), so a resumed run ends bitwise equal on CPU.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from depthlab.config import Config
from depthlab.errors import UserError, write_failed
from depthlab.hooks import HookFn
from depthlab.metrics import read_metrics
from depthlab.outdir import settled
from depthlab.progress import Progress
from depthlab.train import runtime, setup
from depthlab.train.evaluate import log_eval, log_probe, log_train
from depthlab.train.measures import probe_due
from depthlab.train.optim import describe_groups, ngpt_advice
from depthlab.train.setup import LoopState, Run
from depthlab.train.startup import agree_on_start, claim, on_rank0
from depthlab.train.step import apply_step, train_step
from depthlab.train.stop import end_of_step, fail, newest_on_disk, newest_step_on_disk

EXIT_INTERRUPTED = 130
EXIT_DIVERGED = 3


@dataclass(frozen=True)
class RunSummary:
    run_dir: Path
    status: str  # completed | interrupted | failed
    step: int  # optimizer steps done (the checkpoint's step when interrupted)
    steps: int  # the run's target, cfg.train.steps
    tokens: int  # training tokens seen, all ranks together
    train_loss: float | None  # last logged training loss
    val_loss: float | None  # last validation loss
    elapsed_s: float  # wall time of this invocation
    tokens_per_s: float  # mean over this invocation
    message: str
    config: Config  # the resolved config (vocab_size from the tokenizer)

    @property
    def exit_code(self) -> int:
        return {"completed": 0, "interrupted": EXIT_INTERRUPTED}.get(self.status, EXIT_DIVERGED)


def train(
    cfg: Config,
    out_dir: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    max_steps: int | None = None,
    fwd_hooks: Iterable[tuple[str, HookFn]] = (),
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    cache_root: Path | None = None,
) -> RunSummary:
    """Train `cfg` into the run directory `out_dir` and return how it ended.

    resume: continue from the newest readable checkpoint in out_dir (the config must
      match the run's, except device, threads, compile, parallel and
      activation_checkpointing); starts fresh in an empty directory, refuses when
      checkpoints exist but none is readable, and leaves a finished run untouched
      (see depthlab.train.startup).
    overwrite: empty a non-empty out_dir first (otherwise a fresh run refuses it).
    max_steps: stop (as if interrupted, with a checkpoint) after this many steps of
      this call; the schedule still belongs to cfg.train.steps.
    fwd_hooks: (hook name, fn) pairs attached to the model for the whole run.
    on_step: called on rank 0 after every optimizer step with
      (step, {"loss", "lr", "tokens_per_s"}); off CPU the loss and tokens/s are those of
      the latest step whose values were read (depthlab.train.step_reads says which).
    Divergence (non-finite loss or gradient) returns status "failed"; user mistakes
    raise depthlab.errors.UserError.
    """
    out_dir = settled(out_dir)  # `run/checkpoints/..` would vanish with checkpoints/
    proc = runtime.start(cfg)
    lock = None
    try:
        lock = claim(out_dir, proc)  # one process per run directory, held to the end
        return _train(cfg, Path(out_dir), proc, resume, overwrite, progress, max_steps,
                      list(fwd_hooks), on_step, cache_root)
    except OSError as e:  # disk full, a folder made read-only: what --resume will find
        raise UserError(write_failed(e, newest_on_disk(Path(out_dir)))) from None
    finally:
        if lock is not None:
            lock.release()
        proc.close()


def _train(cfg: Config, run_dir: Path, proc: runtime.Runtime, resume: bool, overwrite: bool,
           progress: bool, max_steps: int | None, fwd_hooks: list,
           on_step: Callable | None, cache_root: Path | None) -> RunSummary:
    started = time.time()
    cfg, data = setup.prepare(cfg, proc, cache_root)
    ckpt = agree_on_start(run_dir, cfg, proc, resume, overwrite)
    if ckpt is not None:  # the text, before its vocabulary meets the weights' shapes
        setup.check_same_data(run_dir, data, ckpt, note=proc.is_main)
        on_rank0(proc, lambda: setup.check_kind(cfg, ckpt))  # one rank says it
    model, optimizer = setup.build(cfg, proc, ckpt)
    if ckpt is not None and ckpt.step >= cfg.train.steps:
        return _finished(run_dir, cfg, time.time() - started)
    run = setup.start(cfg, run_dir, proc, data, model, optimizer, ckpt, fwd_hooks)
    if progress and proc.is_main:  # which parameters each optimizer steps
        print(describe_groups(model, optimizer), file=sys.stderr)
    for advice in (ngpt_advice(cfg), runtime.bfloat16_advice(cfg, proc.device)):
        if advice and proc.is_main:
            print(advice, file=sys.stderr)
    st = LoopState(step=run.start_step, saved_step=run.start_step if ckpt else None,
                   rate_from=run.start_step,
                   # the CPU seconds of steps the checkpoint holds but no train line has
                   # counted yet (a stop between two log steps)
                   cpu_s=float(ckpt.state.get("cpu_s_pending", 0.0)) if ckpt else 0.0)
    if ckpt is not None and proc.is_main:  # a resume that stops before evaluating has one
        st.train_loss, st.val_loss = _last_losses(run_dir)
    loop_start = time.time()
    _run_steps(run, st, progress, max_steps, on_step)
    elapsed = time.time() - started
    if run.writer is not None:
        run.writer.log("run_end", step=st.step, status=st.status, message=st.message,
                       diverged=st.status == "failed", elapsed_s=round(elapsed, 3))
        run.writer.close()
    loop_time = max(time.time() - loop_start, 1e-9)
    return RunSummary(run_dir, st.status, st.step, cfg.train.steps,
                      st.step * run.tokens_per_step, st.train_loss, st.val_loss, elapsed,
                      st.run_tokens / loop_time, st.message, cfg)


def _run_steps(run: Run, st: LoopState, progress: bool, max_steps: int | None,
               on_step: Callable | None) -> None:
    """Step 0's evaluation and probe, then steps until the last, a stop or a divergence.
    A second Ctrl-C leaves the last checkpoint standing; any other error is logged as
    the run's end and raised."""
    train_cfg, bar = run.cfg.train, None
    with run.model.hooks(fwd=run.fwd_hooks), runtime.StopSignals() as stop:
        try:
            run.model.train()
            if st.step == 0:
                log_probe(run, 0)
                log_eval(run, st)
            if run.proc.is_main:
                bar = Progress(train_cfg.steps, desc=f"train {run.run_dir.name}", initial=st.step,
                               enabled=progress)
            while st.step < train_cfg.steps:
                if _one_step(run, st, stop, max_steps, bar, on_step):
                    break
        except KeyboardInterrupt:
            st.status = "interrupted"
            st.message = f"stopped hard after step {st.step}; {newest_on_disk(run.run_dir)}"
            st.step = newest_step_on_disk(run.run_dir) or 0  # the summary's step is on disk
        except Exception as e:
            if run.writer is not None:
                try:  # best effort: on a full disk the log cannot take it either
                    run.writer.log("run_end", step=st.step, status="failed",
                                   message=f"{type(e).__name__}: {e}")
                    run.writer.close()
                except OSError:
                    pass
            raise
        finally:
            if bar is not None:
                bar.close()


def _one_step(run: Run, st: LoopState, stop: runtime.StopSignals, max_steps: int | None,
              bar: Progress | None, on_step: Callable | None) -> bool:
    """Train, log, evaluate, probe and save step st.step + 1; True when the loop ends."""
    train_cfg = run.cfg.train
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = train_step(run, st.step)
    out_of_budget = max_steps is not None and st.step + 1 - run.start_step >= max_steps
    read_now = run.reads.every_step or out_of_budget or _values_needed(st.step + 1, run)
    diverged = apply_step(run, st.step, result, read_now)
    if diverged:
        fail(run, st, *diverged)
        return True
    st.step += 1
    st.busy_s += time.perf_counter() - t0
    st.cpu_s += time.process_time() - cpu0
    st.run_tokens += run.tokens_per_step
    if read_now:
        st.rate = (st.step - st.rate_from) * run.tokens_per_step / st.busy_s
        st.rate_from, st.busy_s = st.step, 0.0
        st.train_loss = run.reads.loss
    log_train(run, st, result.lr, bar, on_step)
    if st.step % train_cfg.eval_every == 0 or st.step == train_cfg.steps:
        log_eval(run, st)
    if probe_due(st.step, train_cfg.probe_every, train_cfg.steps):
        log_probe(run, st.step)
    return end_of_step(run, st, stop, read_now, out_of_budget, result.loss, result.grad_norm)


def _values_needed(step: int, run: Run) -> bool:
    """Steps whose loss is logged or that are saved, evaluated or probed."""
    train_cfg = run.cfg.train
    return (step % train_cfg.log_every == 0 or step % train_cfg.ckpt_every == 0 or step == train_cfg.steps
            or step % train_cfg.eval_every == 0 or probe_due(step, train_cfg.probe_every, train_cfg.steps))


def _last_losses(run_dir: Path) -> tuple[float | None, float | None]:
    """The last train loss and validation loss the run's log holds."""
    last = {r["kind"]: r for r in read_metrics(run_dir) if r["kind"] in ("train", "eval")}
    return last.get("train", {}).get("loss"), last.get("eval", {}).get("val_loss")


def _finished(run_dir: Path, cfg: Config, elapsed: float) -> RunSummary:
    """The summary of a run that had already reached its last step; nothing is written."""
    train_cfg = cfg.train
    return RunSummary(run_dir, "completed", train_cfg.steps, train_cfg.steps,
                      train_cfg.steps * train_cfg.batch_size * train_cfg.grad_accum * train_cfg.seq_len,
                      *_last_losses(run_dir),
                      elapsed, 0.0, f"already finished at step {train_cfg.steps}; nothing changed", cfg)
