"""The training loop: one function, `train`, that turns a Config into a run directory.

Step numbers count finished optimizer steps: step 0 is the model at init, step
N the model after N updates. Everything a later step depends on (weights,
optimizer, the step itself) is in each checkpoint, and the data a step reads is
a function of (seed, step), so a resumed run ends bitwise equal on CPU.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from depthlab.config import Config
from depthlab.errors import UserError
from depthlab.hooks import HookFn
from depthlab.memory import check_fits
from depthlab.metrics import MetricsWriter, read_metrics, truncate_after
from depthlab.model import Transformer
from depthlab.model.residual import stream_view
from depthlab.progress import Progress
from depthlab.rundir import METRICS_FILE, TOKENIZER_FILE, load_fitting, write_config
from depthlab.tokenizer import TokenData, prepare_data
from depthlab.train import batches, runtime, step_reads
from depthlab.train.checkpoint import save_checkpoint
from depthlab.train.measures import input_dependence, probe_due
from depthlab.train.optim import lr_at, make_optimizer
from depthlab.train.startup import agree_on_start, claim

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


def resolve_config(cfg: Config, data: TokenData) -> Config:
    """The config a run records: the model's vocabulary is the tokenizer's."""
    return replace(cfg, model=replace(cfg.model, vocab_size=data.vocab_size))


def _check_sizes(cfg: Config, data: TokenData) -> None:
    need = cfg.train.seq_len + 1
    if len(data.train) < need:
        raise UserError(f"corpus {cfg.data.corpus!r}: the train split has {len(data.train)} "
                        f"tokens, fewer than train.seq_len + 1 = {need}")
    if len(data.val) < 2:
        raise UserError(f"corpus {cfg.data.corpus!r}: the val split has under 2 tokens; "
                        "use more text or a larger data.val_fraction")


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


@torch.no_grad()
def evaluate(model: Transformer, data: TokenData, cfg: Config, rt: runtime.Runtime) -> float:
    """Mean loss over the fixed validation windows (shared out across ranks)."""
    offsets, length = batches.eval_offsets(len(data.val), cfg.train.seq_len, cfg.train.eval_tokens)
    mine = offsets[rt.rank::rt.world]
    total = torch.zeros(2, dtype=torch.float64, device=rt.device)
    for i in range(0, len(mine), cfg.train.batch_size):
        x, y = batches.windows(data.val, mine[i:i + cfg.train.batch_size], length, rt.device)
        total[0] += _loss(model(x), y).double() * len(x)
        total[1] += len(x)
    rt.sum(total)
    return (total[0] / total[1]).item()


def probe(model: Transformer, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    """Residual-stream RMS after each write (of `stream_view` for a widened stream) and
    per-block gradient norms on a fixed batch.

    grad_resid_pre[i] is |dLoss/dx| at blocks.{i}.hook_resid_pre (the gradient block i
    receives from everything above it); grad_params[i] is the norm of block i's
    parameter gradients. Computed with autograd.grad, so .grad fields stay untouched.
    """
    L = len(model.blocks)
    acts: dict[str, torch.Tensor] = {}

    def keep(t: torch.Tensor, name: str) -> None:
        acts[name] = t

    names = [f"blocks.{i}.hook_{s}" for i in range(L) for s in ("resid_pre", "resid_mid", "resid_post")]
    with torch.enable_grad(), model.hooks(fwd=[(n, keep) for n in names]):
        logits = model(x)
        loss = _loss(logits, y)
        pre = [acts[f"blocks.{i}.hook_resid_pre"] for i in range(L)]
        params = [list(b.parameters()) for b in model.blocks]
        grads = torch.autograd.grad(loss, pre + [p for ps in params for p in ps],
                                    allow_unused=True)
    rms = lambda t: stream_view(t).detach().float().pow(2).mean().sqrt().item()
    # The stream as opened (the embedding, or its copies), then after each write.
    writes = ["blocks.0.hook_resid_pre"] + [f"blocks.{i}.hook_{s}" for i in range(L)
                                            for s in ("resid_mid", "resid_post")]
    param_grads = iter(grads[L:])
    grad_params = []
    for ps in params:
        sq = sum(float(g.float().pow(2).sum()) for g in (next(param_grads) for _ in ps)
                 if g is not None)
        grad_params.append(math.sqrt(sq))
    return {"loss": loss.item(), "resid_rms": [rms(acts[n]) for n in writes],
            "grad_resid_pre": [g.float().norm().item() for g in grads[:L]],
            "grad_params": grad_params, "input_dependence": input_dependence(logits)}


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
      match the run's, except device/threads/compile); starts fresh in an empty
      directory, refuses when checkpoints exist but none is readable, and leaves a
      finished run untouched (see depthlab.train.startup).
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
    rt = runtime.start(cfg)
    lock = None
    try:
        lock = claim(Path(out_dir), rt)  # one process per run directory, held to the end
        return _train(cfg, Path(out_dir), rt, resume, overwrite, progress, max_steps,
                      list(fwd_hooks), on_step, cache_root)
    finally:
        if lock is not None:
            lock.release()
        rt.close()


def _optimizer_step(optimizer: torch.optim.Optimizer) -> str | None:
    """optimizer.step(); a non-finite value inside AdamW (an overflowing update) is
    divergence, reported like a non-finite loss rather than as a traceback."""
    try:
        optimizer.step()
    except RuntimeError as e:
        if "overflow" not in str(e) and "inf" not in str(e).lower():
            raise
        return f"the optimizer update overflowed ({e})"
    return None


def _divergence_message(what: str, step: int, run_dir: Path, saved_step: int | None) -> str:
    """What went wrong and what is actually on disk (never a step that was not saved)."""
    if saved_step is None:
        return f"{what} at step {step}; stopped, nothing saved (no checkpoint was written yet)"
    ckpt = run_dir / "checkpoints" / f"step_{saved_step:07d}"
    return (f"{what} at step {step}; stopped, the weights on disk are those of step "
            f"{saved_step} (last good checkpoint: {ckpt})")


def _prepare(cfg: Config, rt: runtime.Runtime, cache_root: Path | None) -> TokenData:
    if rt.is_main:  # rank 0 encodes; the others then read the cache
        data = prepare_data(cfg.data, cache_root)
    rt.barrier()
    if not rt.is_main:
        data = prepare_data(cfg.data, cache_root)
    return data


def _finished(run_dir: Path, cfg: Config, elapsed: float) -> RunSummary:
    """The summary of a run that had already reached its last step; nothing is written."""
    last = {r["kind"]: r for r in read_metrics(run_dir) if r["kind"] in ("train", "eval")}
    tc = cfg.train
    return RunSummary(run_dir, "completed", tc.steps, tc.steps,
                      tc.steps * tc.batch_size * tc.grad_accum * tc.seq_len,
                      last.get("train", {}).get("loss"), last.get("eval", {}).get("val_loss"),
                      elapsed, 0.0, f"already finished at step {tc.steps}; nothing changed", cfg)


def _train(cfg: Config, run_dir: Path, rt: runtime.Runtime, resume: bool, overwrite: bool,
           progress: bool,
           max_steps: int | None, fwd_hooks: list, on_step: Callable | None,
           cache_root: Path | None) -> RunSummary:
    started = time.time()
    data = _prepare(cfg, rt, cache_root)
    cfg = resolve_config(cfg, data)
    _check_sizes(cfg, data)
    check_fits(cfg, str(rt.device), world=rt.world)
    tc = cfg.train

    ckpt = agree_on_start(run_dir, cfg, rt, resume, overwrite)

    torch.manual_seed(tc.seed)
    model = Transformer(cfg.model).to(rt.device)
    optimizer = make_optimizer(model, tc)
    start_step = 0
    saved_step = None  # the step of the weights on disk (RUN/model.safetensors)
    if ckpt is not None:
        load_fitting(model, ckpt.weights, f"{ckpt.path} does not fit the config")
        if ckpt.step >= tc.steps:
            return _finished(run_dir, cfg, time.time() - started)
        optimizer.load_state_dict(ckpt.state["optimizer"])
        torch.set_rng_state(ckpt.state["torch_rng"])
        start_step = saved_step = ckpt.step

    writer = None
    if rt.is_main:
        if ckpt is None:
            write_config(run_dir, cfg, seed=tc.seed,
                         tokenizer={"kind": data.tokenizer.kind, "file": TOKENIZER_FILE,
                                    "vocab_size": data.vocab_size},
                         corpus={"spec": cfg.data.corpus, "sha256": data.corpus_sha256,
                                 "train_tokens": len(data.train), "val_tokens": len(data.val)},
                         world_size=rt.world)
            data.tokenizer.save(run_dir / TOKENIZER_FILE)
            (run_dir / METRICS_FILE).unlink(missing_ok=True)  # a fresh run starts a fresh log
        else:
            truncate_after(run_dir, start_step)
        writer = MetricsWriter(run_dir)
        writer.log("run_start", step=start_step, steps=tc.steps, world_size=rt.world,
                   device=str(rt.device), resumed_from=start_step if ckpt else None)

    net: torch.nn.Module = model
    if rt.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(
            model, device_ids=[rt.local_rank] if rt.device.type == "cuda" else None)
    fwd = runtime.compile_or_eager(net) if tc.compile else net
    autocast = (torch.autocast(rt.device.type, dtype=torch.bfloat16)
                if tc.dtype == "bfloat16" else contextlib.nullcontext())

    probe_x, probe_y = batches.fixed_batch(data.val, tc.batch_size, tc.seq_len, rt.device)
    tokens_per_step = tc.batch_size * tc.grad_accum * tc.seq_len

    def checkpoint(step: int) -> None:
        nonlocal saved_step
        if rt.is_main:
            save_checkpoint(run_dir, step, model, optimizer, tc.keep_ckpts,
                            data_position={"seed": tc.seed, "step": step})
        saved_step = step
        rt.barrier()

    def log_probe(step: int) -> None:
        if rt.is_main:
            writer.log("probe", step=step, **probe(model, probe_x, probe_y))

    def log_eval(step: int) -> float:
        val = evaluate(model, data, cfg, rt)
        if rt.is_main:
            writer.log("eval", step=step, tokens=step * tokens_per_step, val_loss=val)
        return val

    def values_needed(step: int) -> bool:
        """Steps whose loss is logged or that are saved, evaluated or probed."""
        return (step % tc.log_every == 0 or step % tc.ckpt_every == 0 or step == tc.steps
                or step % tc.eval_every == 0 or probe_due(step, tc.probe_every, tc.steps))

    def failed(what: str, bad_step: int) -> tuple[str, str, int]:
        """status, message and step (the last sound one) of a run that diverged."""
        optimizer.zero_grad(set_to_none=True)
        return "failed", _divergence_message(what, bad_step, run_dir, saved_step), bad_step - 1

    reads = step_reads.StepReads(rt.device)
    step = start_step
    rate, rate_from, busy_s = 0.0, start_step, 0.0  # tokens/s over the steps since a read
    status, message = "completed", ""
    train_loss = val_loss = None
    bar = None
    run_tokens = 0
    loop_start = time.time()
    with model.hooks(fwd=fwd_hooks), runtime.StopSignals() as stop:
        try:
            model.train()
            if step == 0:
                log_probe(0)
                val_loss = log_eval(0)
            if rt.is_main:
                bar = Progress(tc.steps, desc=f"train {run_dir.name}", initial=step,
                               enabled=progress)
            while step < tc.steps:
                t0 = time.perf_counter()
                lr = lr_at(step, tc)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                loss_sum = torch.zeros((), device=rt.device)
                for micro in range(tc.grad_accum):
                    x, y = (runtime.to_device(t, rt.device) for t in batches.train_batch(
                        data.train, tc.seed, step, micro, tc.batch_size, tc.seq_len, rt.rank,
                        rt.world, torch.device("cpu")))
                    last = micro == tc.grad_accum - 1
                    sync = (net.no_sync() if rt.world > 1 and not last
                            else contextlib.nullcontext())
                    with sync:
                        with autocast:
                            loss = _loss(fwd(x), y) / tc.grad_accum
                        loss.backward()
                    loss_sum += loss.detach()
                loss_t = rt.sum(loss_sum) / rt.world
                grad_norm_t = torch.nn.utils.clip_grad_norm_(
                    model.parameters(), tc.grad_clip if tc.grad_clip > 0 else math.inf)
                reads.record(step + 1, loss_t, grad_norm_t)
                out_of_budget = max_steps is not None and step + 1 - start_step >= max_steps
                read_now = reads.every_step or out_of_budget or values_needed(step + 1)
                diverged = reads.read(step + 1, loss_t, grad_norm_t) if read_now else None
                if diverged is None:
                    problem = _optimizer_step(optimizer)
                    diverged = None if problem is None else (problem, step + 1)
                if diverged:
                    status, message, step = failed(*diverged)
                    break
                optimizer.zero_grad(set_to_none=True)
                step += 1
                busy_s += time.perf_counter() - t0
                run_tokens += tokens_per_step
                if read_now:
                    rate = (step - rate_from) * tokens_per_step / busy_s
                    rate_from, busy_s = step, 0.0
                    train_loss = reads.loss
                if rt.is_main:
                    if step % tc.log_every == 0 or step == tc.steps:
                        writer.log("train", step=step, tokens=step * tokens_per_step,
                                   loss=reads.loss, lr=lr, grad_norm=reads.grad_norm,
                                   tokens_per_s=rate)
                    bar.report(step, loss=reads.loss, tokens_per_s=rate)
                    if on_step is not None:
                        on_step(step, {"loss": reads.loss, "lr": lr, "tokens_per_s": rate})
                if step % tc.eval_every == 0 or step == tc.steps:
                    val_loss = log_eval(step)
                if probe_due(step, tc.probe_every, tc.steps):
                    log_probe(step)
                stop_now = stop.requested if rt.world == 1 else rt.sum(torch.tensor(
                    float(stop.requested), device=rt.device)).item() > 0  # no device sync alone
                if stop_now and not read_now:  # never save steps whose values were not read
                    diverged = reads.read(step, loss_t, grad_norm_t)
                    if diverged:
                        status, message, step = failed(*diverged)
                        break
                if (stop_now or out_of_budget) and step < tc.steps:
                    status, message = "interrupted", f"stopped at step {step}; --resume continues"
                    checkpoint(step)
                    break
                if step % tc.ckpt_every == 0 or step == tc.steps:
                    checkpoint(step)
        except KeyboardInterrupt:  # a second Ctrl-C: the last checkpoint stands
            status, message = "interrupted", f"stopped hard at step {step}; last checkpoint kept"
        except Exception as e:
            status, message = "failed", f"{type(e).__name__}: {e}"
            if writer is not None:
                writer.log("run_end", step=step, status=status, message=message)
                writer.close()
            raise
        finally:
            if bar is not None:
                bar.close()
    elapsed = time.time() - started
    if writer is not None:
        writer.log("run_end", step=step, status=status, message=message,
                   diverged=status == "failed", elapsed_s=round(elapsed, 3))
        writer.close()
    loop_time = max(time.time() - loop_start, 1e-9)
    return RunSummary(run_dir, status, step, tc.steps, step * tokens_per_step, train_loss,
                      val_loss, elapsed, run_tokens / loop_time, message, cfg)
