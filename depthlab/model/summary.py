"""What a model is made of: parameters by component and the shape at every stage.

Built on the `meta` device, so describing a 70B-parameter config allocates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from depthlab.config import PATTERN_LETTERS, ModelConfig, unet_source, value_embed_layers
from depthlab.model.transformer import Block, Transformer
from depthlab.variants import RESIDUAL_SPECS


def component_of(param_name: str) -> str:
    """embedding | attention | ffn | norm | residual | lm_head, from a parameter's dotted
    name (residual: the learned scalars of residual variants such as rezero, and of the
    stream shortcuts; embedding: a value embedding's table and gate)."""
    if param_name.startswith(("embed_tokens", "pos_embed")) or ".value_embed." in param_name:
        return "embedding"
    if param_name.startswith(("lm_head", "logit_scale")):  # nGPT's s_z scales the head's logits
        return "lm_head"
    if "_residual." in param_name or param_name.startswith(SHORTCUT_PREFIXES) or any(
            f".{part}." in param_name for part in BLOCK_SHORTCUTS):
        return "residual"
    if "norm" in param_name:
        return "norm"
    if ".attn." in param_name:
        return DELTANET_PARTS.get(param_name.rsplit(".", 2)[-2 if param_name.endswith(
            (".weight", ".bias")) else -1], "attention")
    if ".mlp." in param_name:
        return "ffn"
    raise ValueError(f"unclassified parameter {param_name}")  # pragma: no cover


# A Gated DeltaNet layer's parameters by what they do (the anatomy of a hybrid checkpoint
# reads the same split): its projections, its gates and decay, its short convolution.
DELTANET_PARTS = {"in_proj_qkv": "linear_projections", "out_proj": "linear_projections",
                  "in_proj_z": "linear_gates", "in_proj_b": "linear_gates",
                  "in_proj_a": "linear_gates", "A_log": "linear_gates",
                  "dt_bias": "linear_gates", "conv1d": "linear_conv"}
SHORTCUT_PREFIXES = ("embed_shortcuts.", "backout.")  # the model's own stream shortcuts
BLOCK_SHORTCUTS = ("x0_mix", "unet_skip")  # those a block holds for its input


# The data-flow stages that hold parameters, in the order of a Pre-Norm forward pass:
# embedding, positions, then once per block attn_norm, attention, attn_residual, ffn_norm,
# ffn, ffn_residual, then final_norm and lm_head. A block's stage by its parameter's prefix:
_BLOCK_PARTS = (("attn_norm_", "attn_norm"), ("attn_residual.", "attn_residual"),
                ("x0_mix.", "attn_residual"), ("unet_skip.", "attn_residual"),
                ("attn.", "attention"), ("mlp_norm_", "ffn_norm"),
                ("mlp_residual.", "ffn_residual"), ("mlp.", "ffn"))


def stage_of(param_name: str) -> str:
    """The data-flow stage a parameter belongs to (the list above): a sublayer's
    norms (in, out or post, whatever the placement) are its *_norm stage; QK-norm sits
    inside attention; a residual variant's learned scalars are its *_residual stage, and
    so are the shortcuts on the block's input (x0_mix, unet_skip); smear is part of the
    embedding, backout of the final norm it precedes."""
    if param_name.startswith("blocks."):
        rest = param_name.split(".", 2)[2]
        for prefix, stage in _BLOCK_PARTS:
            if rest.startswith(prefix):
                return stage
    for prefix, stage in (("embed_tokens.", "embedding"), ("embed_shortcuts.", "embedding"),
                          ("backout.", "final_norm"), ("pos_embed.", "positions"),
                          ("final_norm.", "final_norm"), ("lm_head.", "lm_head"),
                          ("logit_scale.", "lm_head")):
        if param_name.startswith(prefix):
            return stage
    raise ValueError(f"parameter {param_name} has no stage")  # pragma: no cover


@dataclass(frozen=True)
class ParameterCount:
    """The one count of a config's parameters, which `model describe` and the page's
    anatomy both show: by component (whole model), of the last block by component (the
    block every layer but the first repeats), and of that block and the top by stage."""

    by_component: dict[str, int]
    block: dict[str, int]  # the last block's, by component, plus "total"
    by_stage: dict[str, int]  # the top stages whole, the block stages of the last block
    stage_totals: dict[str, int]  # every stage over the whole model

    @property
    def total(self) -> int:
        return sum(self.by_component.values())


def block_kinds(cfg: ModelConfig) -> dict[tuple, list[int]]:
    """The layers grouped by what their block holds: blocks of one kind have the same
    parameters (block 0 has no value-residual mix; value embeddings sit on every other
    layer; U-net skips on the second half's blocks)."""
    skips = {i for i in range(cfg.n_layers) if unet_source(i, cfg.n_layers) is not None}
    embeds = set(value_embed_layers(cfg.n_layers)) if cfg.value_embeds else set()
    kinds: dict[tuple, list[int]] = {}
    mixers = cfg.layer_kinds
    for i in range(cfg.n_layers):
        kinds.setdefault((i == 0, i in embeds, cfg.unet_skips and i in skips, mixers[i]),
                         []).append(i)
    return kinds


def first_layers(cfg: ModelConfig, n: int) -> ModelConfig:
    """The config with its first n layers only (at most n_layers), each with the mixer it
    has in the whole stack: a short model that stands for the long one."""
    n = min(n, cfg.n_layers)
    if cfg.layer_pattern is None:
        return replace(cfg, n_layers=n)
    letter = {kind: key for key, kind in PATTERN_LETTERS.items()}
    return replace(cfg, n_layers=n, layer_pattern="".join(letter[k] for k in cfg.layer_kinds[:n]))


def count_parameters(cfg: ModelConfig) -> ParameterCount:
    """Blocks of one kind (`block_kinds`) have the same parameters, so one block of each,
    built alone on the meta device, stands for all of its kind, and a one-block model for
    the parameters outside the blocks (their sizes do not depend on L): a 1,024-block
    stack is counted as fast as a 2-block one. The last block is the one shown per block."""
    last = cfg.n_layers - 1
    blocks = []
    for layers in block_kinds(cfg).values():
        layer = last if last in layers else layers[0]
        with torch.device("meta"):
            block = Block(cfg, layer)
        blocks += [(f"blocks.{layer}.{name}", p.numel(), len(layers))
                   for name, p in block.named_parameters()]
    named: list[tuple[str, int, int]] = []  # in the model's order: the blocks where they sit
    top = build_meta(first_layers(cfg, 3))  # 3: backout is valid
    for name, p in top.named_parameters():
        if not name.startswith("blocks."):
            named.append((name, p.numel(), 1))
        elif blocks:
            named, blocks = named + blocks, []
    by_component: dict[str, int] = {}
    block_count: dict[str, int] = {"ffn": 0, "norm": 0}  # + the mixer's, residual where it learns
    if cfg.layer_kinds[last] == "attention":
        block_count = {"attention": 0, **block_count}
    by_stage: dict[str, int] = {}
    stage_totals: dict[str, int] = {}
    for name, n, copies in named:
        key, stage = component_of(name), stage_of(name)
        by_component[key] = by_component.get(key, 0) + n * copies
        stage_totals[stage] = stage_totals.get(stage, 0) + n * copies
        is_last = name.startswith(f"blocks.{last}.")
        if is_last or not name.startswith("blocks."):
            by_stage[stage] = by_stage.get(stage, 0) + n
        if is_last:
            block_count[key] = block_count.get(key, 0) + n
    block_count["total"] = sum(block_count.values())
    return ParameterCount(by_component, block_count, by_stage, stage_totals)


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
    """Parameters from `count_parameters`; shapes traced through a stack of at most three
    blocks, whose first stands for all of them (a 1,024-block stack is described as fast
    as a 2-block one)."""
    count = count_parameters(cfg)
    # Block i's shapes are those of the first traced block with its mixer (the first period
    # of a layer pattern holds one of each kind), or of block i itself for a residual whose
    # stream is the history of all writes (attnres): its shape grows block by block.
    kinds = cfg.layer_kinds
    period = len(cfg.layer_pattern) if cfg.layer_pattern else 1
    traced_blocks = cfg.n_layers if RESIDUAL_SPECS[cfg.residual].keeps_history else period
    model = build_meta(first_layers(cfg, max(3, traced_blocks)))  # 3: backout is valid
    shown_by = [i if i < traced_blocks else kinds.index(kinds[i]) for i in range(cfg.n_layers)]

    def block_stages(i: int) -> list[str]:
        mixing = ("attn.hook_v", "attn.hook_state_norm") if kinds[i] != "attention" else (
            "attn.hook_pattern",)
        return ["attn.hook_q", "attn.hook_k", *mixing, "hook_resid_mid", "hook_resid_post"]

    stages = ["hook_embed", *(f"blocks.{i}.{s}" for i in range(traced_blocks)
                              for s in block_stages(i)), "hook_final"]
    traced: dict[str, tuple[int, ...]] = {}

    def record(t: torch.Tensor, name: str) -> None:
        traced[name] = tuple(t.shape[1:])  # drop the batch dimension

    idx = torch.zeros(1, n_tokens, dtype=torch.long, device="meta")
    with torch.no_grad(), model.hooks(fwd=[(s, record) for s in stages]):
        logits = model(idx)
    shapes = [("hook_embed", traced["hook_embed"])]
    for i in range(cfg.n_layers):
        shapes += [(f"blocks.{i}.{s}", traced[f"blocks.{shown_by[i]}.{s}"])
                   for s in block_stages(i)]
    shapes += [("hook_final", traced["hook_final"]), ("logits", tuple(logits.shape[1:]))]
    return ModelSummary(count.by_component, count.total, count.block["total"], shapes)
