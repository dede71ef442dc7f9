"""Real checkpoints in and out: Hugging Face Llama, Qwen2 and Qwen3 <-> depthlab runs.

Import and export need only `safetensors` and `json`; Transformers (the `hf`
extra) is used by the tests to check that the logits agree. Every field and tensor
name comes from one table, `depthlab/hf/mapping.py`, which the anatomy also reads
(through `config_map.py`):
the converters (and torch with them) load on first use, so reading the table does
not wait for torch.
"""

import importlib

from depthlab.hf.config_map import hf_config_from_model, model_config_from_hf
from depthlab.hf.mapping import FAMILIES

_LAZY = {"Converted": "depthlab.hf.convert", "export_run": "depthlab.hf.convert",
         "import_checkpoint": "depthlab.hf.convert"}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "FAMILIES", "Converted", "export_run", "hf_config_from_model", "import_checkpoint",
    "model_config_from_hf",
]
