"""The configurable Transformer: norms, FFNs, attention, blocks, init."""

from depthlab.model.attention import Attention, apply_rope, rope_cos_sin
from depthlab.model.ffn import MLP, SwiGLU, make_ffn
from depthlab.model.norms import LayerNorm, RMSNorm, ZeroCenteredRMSNorm, make_norm
from depthlab.model.transformer import NORM_SLOTS, Block, Transformer, init_weights

__all__ = [
    "Attention", "Block", "LayerNorm", "MLP", "NORM_SLOTS", "RMSNorm", "SwiGLU",
    "Transformer", "ZeroCenteredRMSNorm", "apply_rope", "init_weights", "make_ffn",
    "make_norm", "rope_cos_sin",
]
