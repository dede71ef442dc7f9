"""What a model is made of: parameters by component and the shape at every stage.

Built on the `meta` device, so describing a 70B-parameter config allocates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from depthlab.config import ModelConfig
from depthlab.model.transformer import Transformer


def component_of(param_name: str) -> str:
    """embedding | attention | ffn | norm | lm_head, from a parameter's dotted name."""
    if param_name.startswith(("embed_tokens", "pos_embed")):
        return "embedding"
    if param_name.startswith("lm_head"):
        return "lm_head"
    if "norm" in param_name:
        return "norm"
    if ".attn." in param_name:
        return "attention"
    if ".mlp." in param_name:
        return "ffn"
    raise ValueError(f"unclassified parameter {param_name}")  # pragma: no cover


@dataclass(frozen=True)
class ModelSummary:
    params_by_component: dict[str, int]
    total_params: int
    params_per_block: int
    shapes: list[tuple[str, tuple[int, ...]]]  # (stage, shape) in forward order


def build_meta(cfg: ModelConfig) -> Transformer:
    with torch.device("meta"):
        return Transformer(cfg)


def summarize(cfg: ModelConfig, n_tokens: int = 5) -> ModelSummary:
    model = build_meta(cfg)
    by_component: dict[str, int] = {}
    for name, p in model.named_parameters():
        key = component_of(name)
        by_component[key] = by_component.get(key, 0) + p.numel()
    per_block = sum(p.numel() for p in model.blocks[0].parameters())

    stages = ["hook_embed"]
    for i in range(cfg.n_layers):
        stages += [f"blocks.{i}.attn.hook_q", f"blocks.{i}.attn.hook_k",
                   f"blocks.{i}.attn.hook_pattern", f"blocks.{i}.hook_resid_mid",
                   f"blocks.{i}.hook_resid_post"]
    stages.append("hook_final")
    shapes: list[tuple[str, tuple[int, ...]]] = []

    def record(t: torch.Tensor, name: str) -> None:
        shapes.append((name, tuple(t.shape[1:])))  # drop the batch dimension

    idx = torch.zeros(1, n_tokens, dtype=torch.long, device="meta")
    with torch.no_grad(), model.hooks(fwd=[(s, record) for s in stages]):
        logits = model(idx)
    shapes.append(("logits", tuple(logits.shape[1:])))
    return ModelSummary(by_component, sum(by_component.values()), per_block, shapes)
