"""How a run ends a step: saved on schedule, stopped on request (Ctrl-C, SIGTERM or the
step budget, with a checkpoint to resume from), or failed on divergence, reporting only
weights that are actually on disk.
"""

from __future__ import annotations

from pathlib import Path

import torch

from depthlab.train.checkpoint import checkpoint_dirs, save_checkpoint, save_sharded_checkpoint
from depthlab.train.runtime import StopSignals
from depthlab.train.setup import LoopState, Run


def checkpoint(run: Run, st: LoopState) -> None:
    """Save the state after st.step (rank 0 writes; every rank waits for it)."""
    train_cfg = run.cfg.train
    extra = {"data_position": {"seed": train_cfg.seed, "step": st.step},
             "data": run.identity,  # the text and tokenizer, beside the weights
             "cpu_s_pending": st.cpu_s}  # the next train line's, should this resume
    if run.sharded:  # every process writes its shards (a DCP folder)
        save_sharded_checkpoint(run.run_dir, st.step, run.model, run.optimizer,
                                train_cfg.keep_ckpts, run.proc.is_main, **extra)
    elif run.proc.is_main:
        save_checkpoint(run.run_dir, st.step, run.model, run.optimizer, train_cfg.keep_ckpts,
                        **extra)
    st.saved_step = st.step
    run.proc.barrier()


def newest_step_on_disk(run_dir: Path) -> int | None:
    """The step of the newest checkpoint folder, as the folder says (not as the loop
    believes: an interrupted save may or may not have reached its rename)."""
    found = checkpoint_dirs(run_dir)
    return found[-1][0] if found else None


def newest_on_disk(run_dir: Path) -> str:
    """What a --resume would start from, in words."""
    step = newest_step_on_disk(run_dir)
    if step is None:
        return "no checkpoint is on disk yet"
    path = Path(run_dir) / "checkpoints" / f"step_{step:07d}"
    return f"the newest checkpoint on disk is step {step} ({path}); --resume continues from it"


def divergence_message(what: str, step: int, run_dir: Path, saved_step: int | None) -> str:
    """What went wrong and what is actually on disk (never a step that was not saved)."""
    if saved_step is None:
        return f"{what} at step {step}; stopped, nothing saved (no checkpoint was written yet)"
    ckpt = run_dir / "checkpoints" / f"step_{saved_step:07d}"
    return (f"{what} at step {step}; stopped, the weights on disk are those of step "
            f"{saved_step} (last good checkpoint: {ckpt})")


def fail(run: Run, st: LoopState, what: str, bad_step: int) -> None:
    """Mark a diverged run failed at the last sound step, its gradients dropped."""
    run.optimizer.zero_grad(set_to_none=True)
    st.status = "failed"
    st.message = divergence_message(what, bad_step, run.run_dir, st.saved_step)
    st.step = bad_step - 1


def stop_requested(run: Run, stop: StopSignals) -> bool:
    """Whether any rank was asked to stop (one collective; no device sync on one rank)."""
    if run.proc.world == 1:
        return stop.requested
    return run.proc.sum(torch.tensor(float(stop.requested), device=run.proc.device)).item() > 0


def end_of_step(run: Run, st: LoopState, stop: StopSignals, read_now: bool,
                out_of_budget: bool, loss: torch.Tensor, grad_norm: torch.Tensor) -> bool:
    """After step st.step's logs: stop (interrupted, with a checkpoint) when asked or out
    of budget, else save when due. True when the loop must end here."""
    train_cfg = run.cfg.train
    stop_now = stop_requested(run, stop)
    if stop_now and not read_now:  # never save steps whose values were not read
        diverged = run.reads.read(st.step, loss, grad_norm)
        if diverged:
            fail(run, st, *diverged)
            return True
    if (stop_now or out_of_budget) and st.step < train_cfg.steps:
        st.status, st.message = "interrupted", f"stopped at step {st.step}; --resume continues"
        checkpoint(run, st)
        return True
    if st.step % train_cfg.ckpt_every == 0 or st.step == train_cfg.steps:
        checkpoint(run, st)
    return False
