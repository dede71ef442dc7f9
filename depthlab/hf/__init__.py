"""Real checkpoints in and out: Hugging Face Llama, Qwen2 and Qwen3 <-> depthlab runs.

Import and export need only `safetensors` and `json`; Transformers (the `hf`
extra) is used by the tests to check that the logits agree. Every field and tensor
name comes from one table, `depthlab/hf/mapping.py`.
"""

from depthlab.hf.convert import Converted, export_run, import_checkpoint
from depthlab.hf.mapping import FAMILIES, hf_config_from_model, model_config_from_hf

__all__ = [
    "FAMILIES", "Converted", "export_run", "hf_config_from_model", "import_checkpoint",
    "model_config_from_hf",
]
