"""Training from scratch: `train(cfg, out_dir) -> RunSummary` writes a run directory
(config.json, metrics.jsonl, checkpoints/, model.safetensors, tokenizer.json)."""

from depthlab.train.loop import (
    EXIT_DIVERGED,
    EXIT_INTERRUPTED,
    RunSummary,
    evaluate,
    probe,
    resolve_config,
    train,
)

__all__ = ["EXIT_DIVERGED", "EXIT_INTERRUPTED", "RunSummary", "evaluate", "probe",
           "resolve_config", "train"]
