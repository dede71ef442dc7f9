"""Training from scratch: `train(cfg, out_dir) -> RunSummary` writes a run directory
(config.json, metrics.jsonl, checkpoints/, model.safetensors, tokenizer.json).

Read in the order a run goes: loop (train, the steps' order) -> setup -> step ->
evaluate (validation loss, probe, log lines) -> stop (checkpoint, interrupt, divergence).
"""

from depthlab.train.evaluate import evaluate, probe
from depthlab.train.loop import EXIT_DIVERGED, EXIT_INTERRUPTED, RunSummary, train
from depthlab.train.setup import resolve_config

__all__ = ["EXIT_DIVERGED", "EXIT_INTERRUPTED", "RunSummary", "evaluate", "probe",
           "resolve_config", "train"]
