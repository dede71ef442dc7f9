"""A whole run Config from a Hugging Face config.json: the model from the one mapping
(`depthlab/hf/mapping.py`), data and training defaults that validate around it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from depthlab.config import Config, TrainConfig, validate
from depthlab.errors import UserError
from depthlab.hf.mapping import IMPORT, model_config_from_hf


def run_config_from_hf(raw: dict[str, Any], has_tokenizer: bool) -> tuple[Config, str]:
    """A run Config (model from the checkpoint, data/train defaults that validate) and the
    family the checkpoint belongs to."""
    model, kind = model_config_from_hf(raw, IMPORT)
    base = Config(model=model)
    data = replace(base.data, tokenizer="bpe" if has_tokenizer else base.data.tokenizer)
    train = replace(TrainConfig(), seq_len=min(TrainConfig().seq_len, model.context_len))
    try:
        return validate(Config(model=model, data=data, train=train)), kind
    except UserError as e:
        raise UserError(f"config.json maps to an invalid depthlab config: {e}") from None
