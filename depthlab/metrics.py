"""The metric log: RUN/metrics.jsonl, one JSON object per line, flushed per line,
so a run can be charted while it trains.

Every line has "kind" and "time" (unix seconds); kinds and their other keys:
    run_start  step, steps, world_size, device, resumed_from (step or null)
    train      step, tokens, loss, lr, grad_norm (before clipping), tokens_per_s, cpu_s
               (process CPU seconds of the optimizer steps since the previous train line
               of this invocation: evaluation, probes and checkpoints left out; their sum
               up to a step is the CPU time training took to reach it, resumes included)
    eval       step, tokens, val_loss (on windows spread over the whole val split,
               batches.eval_offsets)
    probe      step, resid_rms (2L+1 values: embedding, then after each write),
               grad_resid_pre (L values: |dLoss/dx| arriving at each block's input),
               grad_params (L values: norm of each block's parameter gradients),
               input_dependence (mean total-variation distance of the predictions
               from their average: 0 for a constant predictor); dense in a run's
               first probe_every steps (depthlab/train/measures.py); with the stream
               shortcuts on, their learned values: x0_mix_resid, x0_mix_x0,
               unet_skip_weight, value_embed_gate (L values each, null on layers
               without one; the gate is its mean on the probe batch), backout_lambda,
               smear_lambda, smear_gate; with model.residual=ngpt, ngpt_alpha_attn and
               ngpt_alpha_mlp (L values: each update's mean alpha); all of them LEARNED_KEYS
    run_end    step, status (completed | interrupted | failed), message, diverged (true when
               a non-finite loss or gradient stopped the run; a crash logs no diverged key)
Readers ignore unknown keys and a truncated last line. On resume the trainer cuts
the log back to the checkpoint's step (see `truncate_after`), so curves never
hold the same step twice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

from depthlab.atomic import atomic_write_text
from depthlab.rundir import METRICS_FILE

KINDS = ("run_start", "train", "eval", "probe", "run_end")

# The learned values a probe line may carry (depthlab.train.measures.shortcut_values): a
# number, or a list with one entry per layer (null on a layer without one).
LEARNED_KEYS = ("x0_mix_resid", "x0_mix_x0", "unet_skip_weight", "backout_lambda",
                "smear_lambda", "smear_gate", "value_embed_gate", "ngpt_alpha_attn",
                "ngpt_alpha_mlp")


class MetricsWriter:
    """Appends one flushed JSON line per `log` call."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def log(self, kind: str, **values: Any) -> None:
        if self._file is None:
            raise ValueError(f"{self.path}: writer is closed")
        record = {"kind": kind, "time": round(time.time(), 3), **values}
        try:
            self._file.write(json.dumps(record, ensure_ascii=False, allow_nan=True) + "\n")
            self._file.flush()
        except OSError as e:  # a full disk says which file it could not take
            raise OSError(e.errno, e.strerror, str(self.path)) from None

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.close()
            except OSError as e:  # the buffered tail could not be written
                raise OSError(e.errno, e.strerror, str(self.path)) from None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parse_lines(text: str) -> list[dict[str, Any]]:
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        if isinstance(record, dict) and "kind" in record:
            records.append(record)
    return records


def read_metrics(run_dir: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """All records of RUN/metrics.jsonl in file order (or only those of one kind).
    A missing file reads as no records."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    records = _parse_lines(path.read_text(encoding="utf-8", errors="replace"))
    return [r for r in records if kind is None or r["kind"] == kind]


def truncate_after(run_dir: Path, step: int) -> int:
    """Drop records with a step later than `step` (the resumed checkpoint); returns how
    many were dropped. Lines without a step are kept."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return 0
    records = _parse_lines(path.read_text(encoding="utf-8", errors="replace"))
    kept = [r for r in records if not isinstance(r.get("step"), int) or r["step"] <= step]
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept)
    atomic_write_text(path, text)
    return len(records) - len(kept)
