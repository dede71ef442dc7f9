"""The decoder-only model: embedding -> L blocks -> final norm -> LM head.

Shape legend: B batch, T tokens, D d_model, V vocabulary. The residual stream
x is [B, T, D] from the embedding to the final norm; each block reads it twice
(attention, FFN) and writes to it twice, so L blocks make 2L writes.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.config import ModelConfig, validate_model
from depthlab.hooks import HookedModule, HookPoint
from depthlab.model.attention import (
    Attention,
    KVCache,
    LayerCache,
    rope_cos_sin,
)
from depthlab.model.deltanet import GatedDeltaNet
from depthlab.model.ffn import make_ffn
from depthlab.model.ngpt import LogitScale, renormalise
from depthlab.model.norms import make_norm
from depthlab.model.residual import make_residual
from depthlab.model.shortcuts import (
    EmbedShortcuts,
    backout,
    has_embed_shortcuts,
    logit_softcap,
    unet_skip,
    x0_mix,
)
from depthlab.variants import NORM_SLOTS  # which norm slots each placement fills


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int = 0) -> None:
        """layer: 0-based position in the stack (LayerNorm Scaling and the value
        residual depend on it)."""
        super().__init__()
        slots = NORM_SLOTS[cfg.placement]
        # norm_scale=depth: the pre-norm outputs of block l (1-based) times 1/sqrt(l).
        # Sun et al. 2025, "The Curse of Depth in Large Language Models" (arXiv:2502.05795),
        # LayerNorm Scaling: h = LN(x) / sqrt(l) for the norms before attention and FFN,
        # so the variance of the Pre-LN stream grows polynomially, not exponentially,
        # with depth; the final norm and QK-norm are left alone (lmsdss/LayerNorm-Scaling).
        self.in_norm_scale = 1.0 / math.sqrt(layer + 1) if cfg.norm_scale == "depth" else 1.0

        def slot(name: str) -> nn.Module | None:
            return make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) if name in slots else None

        self.attn_norm_in, self.attn_norm_out, self.attn_norm_post = (
            slot("in"), slot("out"), slot("post"))
        # The token mixer: softmax attention, or a Gated DeltaNet layer (model.mixer and
        # model.layer_pattern); both read and write the stream through the same slots.
        self.mixer = cfg.layer_kinds[layer]
        self.attn = Attention(cfg, layer) if self.mixer == "attention" else GatedDeltaNet(cfg, layer)
        self.mlp_norm_in, self.mlp_norm_out, self.mlp_norm_post = (
            slot("in"), slot("out"), slot("post"))
        self.mlp = make_ffn(cfg)
        # How each write enters the stream (depthlab.model.residual): one module per write.
        self.attn_residual, self.mlp_residual = make_residual(cfg), make_residual(cfg)
        # Stream shortcuts applied to the block's input by the model (depthlab.model.shortcuts):
        self.x0_mix = x0_mix(cfg, layer)  # x <- resid * x + x0 * x0
        self.unet_skip = unet_skip(cfg, layer)  # x <- x + w * (output of the mirrored block)
        # Hook points, TransformerLens names, in forward order. The stream is [B, T, D], or
        # [B, T, n, D] for a residual that carries n copies; a sublayer's input is [B, T, D].
        self.hook_resid_pre = HookPoint()  # [B, T, (n,) D] the stream entering the block
        self.hook_attn_in = HookPoint()  # [B, T, D] attention's input, after its input norm
        self.hook_attn_out = HookPoint()  # [B, T, D] attention's output, after its output norm
        self.hook_attn_write = HookPoint()  # [B, T, D] that output as it enters (write scale)
        self.hook_resid_mid = HookPoint()  # [B, T, (n,) D] the stream between the sublayers
        self.hook_mlp_in = HookPoint()  # [B, T, D] the FFN's input, after its input norm
        self.hook_mlp_out = HookPoint()  # [B, T, D] the FFN's output, after its output norm
        self.hook_mlp_write = HookPoint()  # [B, T, D] that output as it enters (write scale)
        self.hook_resid_post = HookPoint()  # [B, T, (n,) D] the stream leaving the block

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None,
                cache: LayerCache | None = None, v_first: torch.Tensor | None = None,
                tokens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The new stream, and layer 0's V for the value residual (see Attention); tokens:
        the ids [B, T], for a value embedding."""
        x = self.hook_resid_pre(x)

        # Attention sublayer: read the stream, transform, write back.
        h = self.attn_residual.read(x)
        h = self.hook_attn_in(self.norm_in(self.attn_norm_in, h))
        h, v_first = self.attn(h, rope, cache, v_first, tokens)
        h = self.hook_attn_out(self.attn_norm_out(h) if self.attn_norm_out else h)
        write = self.hook_attn_write(self.attn_residual.scale(h))
        x = self.attn_residual(x, write)  # x + write, or the variant chosen by model.residual
        x = self.attn_norm_post(x) if self.attn_norm_post else x
        x = self.hook_resid_mid(x)

        # FFN sublayer: the same three slots and the same add.
        h = self.mlp_residual.read(x)
        h = self.hook_mlp_in(self.norm_in(self.mlp_norm_in, h))
        h = self.mlp(h)
        h = self.hook_mlp_out(self.mlp_norm_out(h) if self.mlp_norm_out else h)
        write = self.hook_mlp_write(self.mlp_residual.scale(h))
        x = self.mlp_residual(x, write)
        x = self.mlp_norm_post(x) if self.mlp_norm_post else x
        return self.hook_resid_post(x), v_first

    def norm_in(self, norm: nn.Module | None, h: torch.Tensor) -> torch.Tensor:
        """The input-norm slot: Norm(h), times 1/sqrt(l) with norm_scale=depth."""
        if norm is None:
            return h
        h = norm(h)
        return h if self.in_norm_scale == 1.0 else h * self.in_norm_scale

    def extra_repr(self) -> str:
        return "" if self.in_norm_scale == 1.0 else f"in_norm_scale={self.in_norm_scale:.6g}"


class Transformer(HookedModule):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = validate_model(cfg)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_embed = (
            nn.Embedding(cfg.context_len, cfg.d_model) if cfg.position == "learned" else None
        )
        self.hook_embed = HookPoint()
        # smear and x0_mix's norm, between the embedding and the first block: x0
        self.embed_shortcuts = EmbedShortcuts(cfg) if has_embed_shortcuts(cfg) else None
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        for i, block in enumerate(self.blocks):  # for residuals whose init depends on depth
            block.attn_residual.write_index, block.mlp_residual.write_index = 2 * i, 2 * i + 1
        self.backout = backout(cfg)  # x <- x - lambda * x_mid before the final norm
        self.final_norm = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) if cfg.final_norm else None
        self.hook_final = HookPoint()
        self._rope_tables: dict = {}
        self._rope_kept: tuple | None = None  # (table, start, end, (cos, sin)): the last slice
        self.lm_head = (
            None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        )
        # nGPT: logits times a learned s_z per vocabulary entry (depthlab.model.ngpt).
        self.logit_scale = (LogitScale(cfg.vocab_size, cfg.d_model) if cfg.on_sphere
                            else None)
        init_weights(self)

    def rope(self, n_tokens: int, like: torch.Tensor, start: int = 0,
             positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """cos, sin for tokens at positions start..start+n_tokens-1 ([T, E]), or at the
        given `positions` ([T] -> [T, E]; [B, T] -> [B, 1, T, E], one row per sequence)."""
        if self.cfg.position != "rope":
            return None
        end = start + n_tokens if positions is None else int(positions.max()) + 1
        table = self._rope_table(max(end, self.cfg.context_len), like)
        cos, sin = table
        if positions is None and torch.compiler.is_compiling():
            return cos[start:end], sin[start:end]
        if positions is None:  # the same tuple while the slice is: Attention keeps what
            kept = self._rope_kept  # it derives from it (fused RoPE's complex turns)
            if kept is None or kept[0] is not table or kept[1:3] != (start, end):
                kept = self._rope_kept = (table, start, end, (cos[start:end], sin[start:end]))
            return kept[3]
        cos, sin = cos[positions], sin[positions]
        return (cos, sin) if positions.ndim == 1 else (cos.unsqueeze(1), sin.unsqueeze(1))

    def _rope_table(self, n: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cos/sin table for n positions, kept between calls (it depends only on the
        config, the dtype and the device); rows are the same whatever n is."""
        key = (like.dtype, like.device)
        table = self._rope_tables.get(key)
        if table is None or table[0].shape[0] < n:
            # Built outside inference mode even when called from it: the table is kept,
            # and an inference tensor could not be saved for a later training backward.
            with torch.inference_mode(False):
                table = rope_cos_sin(n, self.cfg.rotary_dim, self.cfg.rope_theta, like.dtype,
                                     like.device)
            if not torch.compiler.is_compiling():
                self._rope_tables[key] = table
        return table

    def embed(self, idx: torch.Tensor, start: int = 0,
              positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token ids [B, T] -> residual stream [B, T, D]; learned positions are those of
        start..start+T-1, or `positions` ([T] or [B, T]) when given."""
        T = idx.shape[1]
        x = self.embed_tokens(idx)
        if self.pos_embed is not None:
            last = start + T if positions is None else int(positions.max()) + 1
            if positions is None:
                positions = torch.arange(start, start + T, device=idx.device)
            if last > self.cfg.context_len:
                raise ValueError(f"position {last - 1} is past the learned positions "
                                 f"(model.context_len={self.cfg.context_len})")
            x = x + self.pos_embed(positions)
        return self.hook_embed(x)

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """Residual stream [B, T, D] -> logits [B, T, V]."""
        x = self.hook_final(self.final_norm(x) if self.final_norm else x)
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(x, weight)  # x @ weight.T
        if self.logit_scale is not None:  # nGPT's s_z
            logits = self.logit_scale(logits)
        return logit_softcap(logits, self.cfg.logit_softcap)

    def after_optimizer_step(self) -> None:
        """What a design keeps true of its weights after every update, whatever the
        optimizer: nGPT's unit vectors (depthlab.model.ngpt). The trainer calls it."""
        if self.cfg.on_sphere:
            renormalise(self)

    def forward(self, idx: torch.Tensor | None = None, *, embeds: torch.Tensor | None = None,
                positions: torch.Tensor | None = None,
                cache: KVCache | None = None, logits_to_keep: int = 0) -> torch.Tensor:
        """Logits [B, T, V] for token ids [B, T], or for a residual stream given as `embeds`
        (with model.value_embeds, the ids too: the value embeddings look them up).

        positions: each token's position, [T] or [B, T] (any offset, per row); default
          0..T-1, or after the cached tokens when `cache` is given.
        cache: a KVCache holding the earlier tokens' keys and values; this call's are
          appended, so the next call continues the sequence.
        logits_to_keep: when > 0, only the last that many positions go through the final
          norm and the LM head (a prompt needs the logits of its last token only).
        """
        start = 0 if cache is None else cache.length
        x = self.embed(idx, start, positions) if embeds is None else embeds
        n_tokens = x.shape[1]
        rope = self.rope(n_tokens, x, start, positions)
        if self.embed_shortcuts is not None:  # smear reads the token before, cached or not
            prev = None if cache is None or cache.length == 0 else cache.prev_embed
            x, last = self.embed_shortcuts(x, prev)
            if cache is not None:
                cache.prev_embed = last
        x0 = x  # x0_mix: what every block's input mixes back in
        x = self.blocks[0].attn_residual.open(x)  # one stream, or the residual's own layout
        v_first = None  # value_residual: layer 0's V, passed on to every later block
        outputs, x_mid = [], None  # unet_skips: block outputs; backout: the middle one's
        for i, block in enumerate(self.blocks):
            if block.x0_mix is not None:
                x = block.x0_mix(x, x0)
            if block.unet_skip is not None:
                x = block.unet_skip(x, outputs[block.unet_skip.source])
            x, v_first = block(x, rope, None if cache is None else cache.layer(i), v_first, idx)
            if self.cfg.unet_skips:
                outputs.append(x)
            if self.backout is not None and i == self.backout.layer:
                x_mid = x
        if cache is not None:
            cache.length += n_tokens
        x = self.blocks[-1].mlp_residual.close(x)
        if self.backout is not None:
            x = self.backout(x, x_mid)
        return self.unembed(x[:, -logits_to_keep:] if logits_to_keep else x)


# the linears that write into the residual stream (out_proj: a Gated DeltaNet layer's)
OUTPUT_PROJECTIONS = ("o_proj", "out_proj", "down_proj")


def resets_itself(module: nn.Module) -> bool:
    """A module whose init is its own `reset_parameters`: every depthlab module that has one
    (a norm, a residual's or a shortcut's scalars and gates, nGPT's scales, a Gated
    DeltaNet's conv, decay and gated norm). torch's own layers are not: the linears and
    embeddings take the depth rule of `init_weights`, a conv the module that holds it."""
    return hasattr(module, "reset_parameters") and type(module).__module__.startswith("depthlab.")


def init_weights(model: Transformer, gain: float | None = None) -> None:
    """Initialise every weight; the one place init rules live. In module order:

    | tensor                                   | init                                           |
    | ---------------------------------------- | ---------------------------------------------- |
    | embed_tokens, pos_embed (nn.Embedding)   | normal(0, init_std * gain)                     |
    | every nn.Linear weight (q/k/v, gate, up) | normal(0, init_std * gain)                     |
    | o_proj, down_proj (they write the stream) | normal(0, out_proj_std): init_std * gain /     |
    |                                          | sqrt(2L) with scaled_init (GPT-2, Radford 2019) |
    | ... each, for the residual's design      | times `init_scale(name)` from `init_base(std)` |
    |                                          | (deepnorm: Xavier-normal v/o/FFN times beta)   |
    | every nn.Linear bias                     | 0                                              |
    | every depthlab module with parameters    | its own `reset_parameters`: a norm's identity, |
    |                                          | a residual's, a shortcut's and nGPT's values   |
    |                                          | as their specs' `init` says (depthlab.variants)|
    |                                          | a Gated DeltaNet's conv, A_log and dt_bias     |
    | with a residual `on_sphere` (nGPT)       | then every weight vector onto the unit sphere  |

    The depth scaling lives here alone (`ModelConfig.out_proj_std` and the residual's
    `init_scale`); a new module with parameters brings its `reset_parameters` and needs
    no entry here.
    """
    cfg = model.cfg if gain is None else replace(model.cfg, init_gain=gain)
    std, out_std = cfg.init_std * cfg.init_gain, cfg.out_proj_std
    residual = model.blocks[0].attn_residual
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            base = residual.init_base(module, out_std if name.endswith(OUTPUT_PROJECTIONS) else std)
            nn.init.normal_(module.weight, 0.0, base * residual.init_scale(name))
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std)
        elif resets_itself(module) and module is not model:
            module.reset_parameters()
    if cfg.on_sphere:  # every weight vector along d_model on the unit sphere
        renormalise(model)
