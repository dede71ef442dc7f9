"""The same questions asked of the real model: `depthlab.model.Transformer` at init.

Built from any `ModelConfig` (every preset, every switch), read only through the hook
points, in float64. Sublayer l's input is the stream it reads: `blocks.i.hook_resid_pre`
(attention) and `blocks.i.hook_resid_mid` (FFN); its write lands in `hook_resid_mid` /
`hook_resid_post`. The input is the model's own embedding of random tokens.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from functools import lru_cache

import torch

from depthlab.config import ModelConfig, validate_model
from depthlab.errors import UserError
from depthlab.model import Transformer, init_weights
from depthlab.probes.simulator import json_list, json_number
from depthlab.probes.stream import stream_measures, stream_sites

MAX_REAL_TOKENS = 1024


@dataclass(frozen=True)
class RealRequest:
    model: ModelConfig
    tokens: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        validate_model(self.model)
        limit = min(MAX_REAL_TOKENS, self.model.context_len)
        if not isinstance(self.tokens, int) or not 2 <= self.tokens <= limit:
            raise UserError(f"tokens must be an integer between 2 and {limit}, got {self.tokens!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise UserError(f"seed must be an integer >= 0, got {self.seed!r}")

    def to_json(self) -> dict:
        return {"model": asdict(self.model), "tokens": self.tokens, "seed": self.seed}


@dataclass(frozen=True)
class RealResult:
    """Per sublayer (2L of them, bottom first) and per stream state (2L + 1, index 0 = embedding)."""

    request: RealRequest
    sublayers: tuple[str, ...]  # "0.attn", "0.mlp", "1.attn", ...
    grad_norm: tuple[float, ...]  # |dLoss/d(stream read by sublayer l)|
    per_layer: tuple[float, ...]  # relative to the top sublayer
    ratio: float  # bottom / top
    stream_rms: tuple[float, ...]  # index 0 = embedding, k = after write k
    rel_distance: tuple[float, ...]  # token collapse of the stream, same indexing
    mean_cosine: tuple[float, ...]

    def to_json(self) -> dict:
        # A stack without residual can shrink the stream to exactly 0: 0/0 becomes null.
        return {"kind": "real", "request": self.request.to_json(),
                "sublayers": list(self.sublayers), "ratio": json_number(self.ratio),
                "per_layer": json_list(self.per_layer), "grad_norm": json_list(self.grad_norm),
                "stream_rms": json_list(self.stream_rms),
                "rel_distance": json_list(self.rel_distance),
                "mean_cosine": json_list(self.mean_cosine)}


_MODEL_LOCK = threading.Lock()  # one request at a time re-initialises a shared model


@lru_cache(maxsize=8)
def _float64_model(cfg: ModelConfig) -> Transformer:
    """The model for `cfg`, built once: laid out on the meta device (no memory, no default
    init) and given float64 storage; `real_probe` initialises it for each seed."""
    with torch.device("meta"):
        model = Transformer(cfg)
    return model.to_empty(device="cpu").to(torch.float64)


@lru_cache(maxsize=64)
def real_probe(req: RealRequest) -> RealResult:
    """Gradient reach, stream RMS and token collapse of a freshly initialised model."""
    with _MODEL_LOCK:
        return _probe(req)


def _probe(req: RealRequest) -> RealResult:
    model = _float64_model(req.model)
    torch.manual_seed(req.seed)
    init_weights(model)  # every parameter, drawn in float64
    gen = torch.Generator().manual_seed(req.seed)
    idx = torch.randint(0, req.model.vocab_size, (1, req.tokens), generator=gen)
    readout = torch.randn(1, req.tokens, req.model.vocab_size, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        x = model.embed(idx)
    x.requires_grad_()  # so the gradient arriving at the bottom sublayer is recorded too
    reads, writes = stream_sites(req.model.n_layers)
    # Loss: a fixed random readout of the logits, so only the stack shapes the gradient.
    _, cache = model.run_with_cache(idx, embeds=x, names=list(dict.fromkeys(reads + writes)),
                                    grad_of=lambda logits: (logits * readout).sum())
    m = stream_measures(cache, req.model.n_layers, x)
    return RealResult(req, tuple(m["sublayers"]), tuple(m["grad_norm"]), tuple(m["per_layer"]),
                      m["ratio"], tuple(m["stream_rms"]), tuple(m["rel_distance"]),
                      tuple(m["mean_cosine"]))
