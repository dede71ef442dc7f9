"""What the trainer measures besides the training loss, and the log lines it writes:
validation loss on fixed windows, and the probe of the residual stream on a fixed batch
(depthlab.probes.stream holds the reading; metrics.jsonl's keys are in depthlab.metrics).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from depthlab.config import Config
from depthlab.model import Transformer
from depthlab.probes.stream import training_probe
from depthlab.progress import Progress
from depthlab.tokenizer import TokenData
from depthlab.train import batches, runtime
from depthlab.train.measures import input_dependence, shortcut_values
from depthlab.train.setup import LoopState, Run
from depthlab.train.step import lm_loss


@torch.no_grad()
def evaluate(model: Transformer, data: TokenData, cfg: Config, proc: runtime.Runtime) -> float:
    """Mean loss over the fixed validation windows (shared out across ranks)."""
    offsets, length = batches.eval_offsets(len(data.val), cfg.train.seq_len, cfg.train.eval_tokens)
    mine, size = offsets[proc.rank::proc.world], cfg.train.batch_size
    # fsdp: every process runs as many forwards as the busiest (each gathers weights with
    # the others); a process out of windows runs its first again and counts nothing
    rounds = -(-len(offsets[0::proc.world]) // size)
    total = torch.zeros(2, dtype=torch.float64, device=proc.device)
    for i in range(0, rounds * size, size):
        part = mine[i:i + size]
        if len(part) == 0 and cfg.train.parallel != "fsdp":
            break
        x, y = batches.windows(data.val, part if len(part) else offsets[:1], length, proc.device)
        loss = lm_loss(model(x), y).double()
        if len(part):
            total[0] += loss * len(x)
            total[1] += len(x)
    proc.sum(total)
    return (total[0] / total[1]).item()


def probe(model: Transformer, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    """A probe line's values on the batch (x, y): the stream and gradient reading of
    `depthlab.probes.stream.training_probe` and how much the predictions depend on the
    input, and the stream shortcuts' learned scalars and gates where the model has them.
    The .grad fields stay untouched."""
    logits, values = training_probe(model, x, y, lm_loss)
    return {**values, "input_dependence": input_dependence(logits), **shortcut_values(model, x)}


def log_probe(run: Run, step: int) -> None:
    """Rank 0 probes the model and logs it; under fsdp every process first sends it its
    shards, and it probes a whole copy (the probe reads weights and runs a backward that
    a sharded model would make every process join)."""
    model = whole_model(run) if run.sharded else run.model
    if run.writer is not None:
        run.writer.log("probe", step=step, **probe(model, *run.probe_batch))


def whole_model(run: Run) -> Transformer | None:
    """Every process: gather the sharded weights to rank 0, which loads them into its copy
    (laid out once, without drawing an init: the RNG stays the run's). None elsewhere."""
    full = get_model_state_dict(run.model, options=StateDictOptions(
        full_state_dict=True, cpu_offload=True))
    if not run.proc.is_main:
        return None
    if run.probe_copy is None:
        with torch.device("meta"):
            run.probe_copy = Transformer(run.cfg.model)
        run.probe_copy.to_empty(device=run.proc.device)
    run.probe_copy.load_state_dict(full)
    return run.probe_copy.train(run.model.training)


def log_eval(run: Run, st: LoopState) -> None:
    """Evaluate on every rank; rank 0 logs. The value is kept for the run's summary."""
    st.val_loss = evaluate(run.model, run.data, run.cfg, run.proc)
    if run.writer is not None:
        run.writer.log("eval", step=st.step, tokens=st.step * run.tokens_per_step,
                       val_loss=st.val_loss)


def log_train(run: Run, st: LoopState, lr: float, bar: Progress | None,
              on_step: Callable[[int, dict[str, float]], None] | None) -> None:
    """Rank 0: the train line (every log_every steps and at the last), the progress bar
    and the caller's on_step, with the values of the latest read."""
    if run.writer is None:
        return
    train_cfg, loss = run.cfg.train, run.reads.loss
    if st.step % train_cfg.log_every == 0 or st.step == train_cfg.steps:
        run.writer.log("train", step=st.step, tokens=st.step * run.tokens_per_step, loss=loss,
                       lr=lr, grad_norm=run.reads.grad_norm, tokens_per_s=st.rate,
                       cpu_s=round(st.cpu_s, 6))
        st.cpu_s = 0.0
    if bar is not None:
        bar.report(st.step, loss=loss, tokens_per_s=st.rate)
    if on_step is not None:
        on_step(st.step, {"loss": loss, "lr": lr, "tokens_per_s": st.rate})
