"""Stream shortcuts: the changes to the residual bus that today's fastest small-model
recipes make around the blocks, each a switch of ModelConfig.

    smear       x_t <- x_t + lambda * sigmoid(w . x_t[:24]) * x_(t-1)     (nanochat `smear`)
    x0_mix      before block i: x <- resid_i * x + x0_i * x0                (nanochat, modded-nanogpt)
                x0 = the normalised (and smeared) embedding, where the stream also starts
    unet_skips  before block L-1-j (j < L//2): x <- x + w_j * (output of block j)  (modded-nanogpt)
    backout     before the final norm: x <- x - lambda * (stream after block L//2) (nanochat)
    value_embeds on every other layer: v <- v + 3 sigmoid(W h[:12]) * E_i[token]   (nanochat)
    logit_softcap logits <- cap * tanh(logits / cap)                        (Gemma 2; nanochat's 15)

Inits are nanochat's (karpathy/nanochat `gpt.py` `init_weights`): resid_i from 1.15 down to
1.05 and x0_i from 0.20 down to 0.05, linearly over depth; backout's lambda 0.2; smear's
lambda 0 (off until learned) with its gate uniform in [0, 0.02]; value embeddings uniform
with the std of a 1/sqrt(d) init, their gates uniform in [0, 0.02] (each gate starts near
3 sigmoid(0) = 1.5). U-net skip weights start at 1 (modded-nanogpt, Nov 2024).

Shape legend: B batch, T tokens, D d_model, K key/value heads, E head size, V vocabulary.
The scalars and gates take no weight decay; a value embedding's table is decayed as the
token embedding is, with train.decay_embeddings (depthlab.train.optim).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.config import (
    SMEAR_CHANNELS,
    VALUE_EMBED_GATE_CHANNELS,
    ModelConfig,
    middle_layer,
    unet_source,
    value_embed_layers,
)
from depthlab.hooks import HookPoint

GATE_INIT = 0.02  # smear's and the value embeddings' gates ~ uniform(0, 0.02)


def x0_mix_init(layer: int, n_layers: int) -> tuple[float, float]:
    """nanochat's (resid, x0) at `layer`: 1.15 -> 1.05 and 0.20 -> 0.05 over depth."""
    depth = layer / max(n_layers - 1, 1)
    return 1.15 - 0.10 * depth, 0.20 - 0.15 * depth


class X0Mix(nn.Module):
    """x <- resid_lambda * x + x0_lambda * x0, before one block: every block can re-read the
    embedding directly and shrink (or grow) what the stream carried so far."""

    def __init__(self, layer: int, n_layers: int) -> None:
        super().__init__()
        self.init = x0_mix_init(layer, n_layers)
        self.resid_lambda = nn.Parameter(torch.tensor(self.init[0]))
        self.x0_lambda = nn.Parameter(torch.tensor(self.init[1]))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.resid_lambda.fill_(self.init[0])
            self.x0_lambda.fill_(self.init[1])

    def forward(self, x: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        return self.resid_lambda * x + self.x0_lambda * x0

    def extra_repr(self) -> str:
        return f"resid_init={self.init[0]:.4g}, x0_init={self.init[1]:.4g}"


class UNetSkip(nn.Module):
    """x <- x + weight * skip: the output of the mirrored first-half block, added to this
    block's input (modded-nanogpt's U-net, `skip_weights` initialised to 1)."""

    def __init__(self, source: int) -> None:
        super().__init__()
        self.source = source  # the block whose output is added
        self.weight = nn.Parameter(torch.ones(()))
        self.hook_skip = HookPoint()  # what it adds: weight * skip [B, T, D]

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return x + self.hook_skip(self.weight * skip)

    def extra_repr(self) -> str:
        return f"from_block={self.source}"


class ValueEmbedding(nn.Module):
    """A per-layer table of values by token, added to the attention's V through a gate per
    K/V head read from the attention input: v <- v + 3 sigmoid(W h[:12]) * table[token].

    The gate lies in (0, 3), so a layer can ignore the table or lean on it; the token's
    value reaches the layer whatever the stream has done to it (nanochat `ve_gate`)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.K, self.E = cfg.kv_heads, cfg.head_size
        self.table = nn.Parameter(torch.empty(cfg.vocab_size, self.K * self.E))
        self.gate = nn.Parameter(torch.empty(self.K, VALUE_EMBED_GATE_CHANNELS))
        self.table_bound = math.sqrt(3.0 / cfg.d_model)  # uniform with std 1/sqrt(d), as c_v
        self.hook_gate = HookPoint()  # [B, K, T], in (0, 3)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.table, -self.table_bound, self.table_bound)
        nn.init.uniform_(self.gate, 0.0, GATE_INIT)

    def forward(self, tokens: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """What it adds to v [B, K, T, E], for token ids [B, T] and the attention input h."""
        B, T = tokens.shape
        gate = 3 * torch.sigmoid(F.linear(h[..., :VALUE_EMBED_GATE_CHANNELS], self.gate))
        gate = self.hook_gate(gate.transpose(1, 2))  # [B, K, T]
        values = F.embedding(tokens, self.table).view(B, T, self.K, self.E).transpose(1, 2)
        return gate.unsqueeze(-1) * values

    def extra_repr(self) -> str:
        return f"table=[{self.table.shape[0]}, {self.K}x{self.E}], gate_channels=" \
               f"{VALUE_EMBED_GATE_CHANNELS}"


class Smear(nn.Module):
    """x_t <- x_t + lambda * sigmoid(w . x_t[:24]) * x_(t-1): a little of the previous
    token's embedding in each token's, a cheap bigram (nanochat `smear`); lambda starts at
    0, so the model starts without it. The first token has no previous one: `prev` (the
    last embedding before these tokens, from a KV cache) or nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Parameter(torch.empty(1, SMEAR_CHANNELS))
        self.lam = nn.Parameter(torch.zeros(()))
        self.hook_gate = HookPoint()  # [B, T, 1]: lambda * sigmoid(...) for each token
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.gate, 0.0, GATE_INIT)
        nn.init.zeros_(self.lam)

    def forward(self, x: torch.Tensor, prev: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, D]; prev [B, 1, D], the embedding of the token before x[:, 0], or None."""
        if prev is None:  # the first token keeps its own embedding
            before, current = x[:, :-1], x[:, 1:]
        else:
            before, current = torch.cat([prev, x[:, :-1]], dim=1), x
        gate = self.lam * torch.sigmoid(F.linear(current[..., :SMEAR_CHANNELS], self.gate))
        mixed = current + self.hook_gate(gate) * before
        return mixed if prev is not None else torch.cat([x[:, :1], mixed], dim=1)


class Backout(nn.Module):
    """x <- x - lambda * x_mid before the final norm, x_mid the stream after block L//2:
    the low-level features the middle of the stack wrote are taken back out before the
    readout (nanochat `backout_lambda`, 0.2 at init)."""

    LAMBDA_INIT = 0.2

    def __init__(self, layer: int) -> None:
        super().__init__()
        self.layer = layer  # the block after which x_mid is read
        self.lam = nn.Parameter(torch.tensor(self.LAMBDA_INIT))
        self.hook_x_mid = HookPoint()  # the stream after block `layer` [B, T, D]

    def reset_parameters(self) -> None:
        nn.init.constant_(self.lam, self.LAMBDA_INIT)

    def forward(self, x: torch.Tensor, x_mid: torch.Tensor) -> torch.Tensor:
        return x - self.lam * self.hook_x_mid(x_mid)

    def extra_repr(self) -> str:
        return f"after_block={self.layer}, lambda_init={self.LAMBDA_INIT}"


class EmbedShortcuts(nn.Module):
    """What happens between the embedding and the first block: (x0_mix) an RMS norm
    without a scale, then smear; the result is x0, where the stream starts (as nanochat:
    x = norm(x) after the token embedding, then smear, then x0 = x, so smear's gate reads
    normalised channels)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.normalise, self.eps = cfg.x0_mix, cfg.norm_eps
        self.smear = Smear() if cfg.smear else None
        self.hook_x0 = HookPoint()  # the stream the first block reads [B, T, D]

    def forward(self, x: torch.Tensor, prev: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """The embedding [B, T, D] -> x0, and the last token's embedding as smear mixes it
        into the next token's (a KV cache keeps it for the next call: `prev` [B, 1, D])."""
        if self.normalise:
            x = F.rms_norm(x, (x.shape[-1],), eps=self.eps)
        last = x[:, -1:]
        if self.smear is not None:
            x = self.smear(x, prev)
        return self.hook_x0(x), last

    def extra_repr(self) -> str:
        return "rms_norm" if self.normalise else ""


def logit_softcap(logits: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap * tanh(logits / cap): logits near 0 unchanged, large ones bounded by +-cap
    (Gemma 2; nanochat's 15)."""
    return logits if cap is None else cap * torch.tanh(logits / cap)


def has_embed_shortcuts(cfg: ModelConfig) -> bool:
    return cfg.x0_mix or cfg.smear


def backout(cfg: ModelConfig) -> Backout | None:
    return Backout(middle_layer(cfg.n_layers)) if cfg.backout else None


def x0_mix(cfg: ModelConfig, layer: int) -> X0Mix | None:
    return X0Mix(layer, cfg.n_layers) if cfg.x0_mix else None


def unet_skip(cfg: ModelConfig, layer: int) -> UNetSkip | None:
    source = unet_source(layer, cfg.n_layers) if cfg.unet_skips else None
    return None if source is None else UNetSkip(source)


def value_embedding(cfg: ModelConfig, layer: int) -> ValueEmbedding | None:
    return ValueEmbedding(cfg) if cfg.value_embeds and layer in value_embed_layers(cfg.n_layers) \
        else None


# Parameter names of gates: matrices by shape, but no weight decay (a value embedding's
# `table` is an embedding: decayed with train.decay_embeddings, as the token embedding is).
NO_DECAY_PARTS = ("value_embed.gate", "smear.gate")


def describe(cfg: ModelConfig) -> str:
    """The shortcuts a config switches on, in one line for `model describe` ("" for none)."""
    L, parts = cfg.n_layers, []
    if cfg.smear:
        parts.append("smear (lambda 0 at init)")
    if cfg.x0_mix:
        (r0, z0), (r1, z1) = x0_mix_init(0, L), x0_mix_init(L - 1, L)
        parts.append(f"x0_mix (resid {r0:.3g} -> {r1:.3g}, x0 {z0:.3g} -> {z1:.3g} over depth)")
    if cfg.value_embeds:
        parts.append(f"value_embeds (layers {', '.join(map(str, value_embed_layers(L)))})")
    if cfg.unet_skips:
        pairs = [f"{unet_source(i, L)}->{i}" for i in range(L) if unet_source(i, L) is not None]
        parts.append(f"unet_skips (block output -> block input: {', '.join(pairs)})")
    if cfg.backout:
        parts.append(f"backout (stream after block {middle_layer(L)}, lambda "
                     f"{Backout.LAMBDA_INIT})")
    if cfg.logit_softcap is not None:
        parts.append(f"logit_softcap={cfg.logit_softcap:g}")
    return "; ".join(parts)


def learned_values(model: nn.Module) -> dict[str, float | list[float | None]]:
    """The shortcuts' learned scalars now, per layer where they are per layer (None on a
    layer without one): what the probe lines log so a run shows which layers lean on the
    embedding shortcut and how much of the middle stream is backed out."""
    blocks, out = list(model.blocks), {}

    def per_layer(get) -> list[float | None]:
        return [None if get(b) is None else float(get(b)) for b in blocks]

    with torch.no_grad():
        if blocks[0].x0_mix is not None:
            out["x0_mix_resid"] = per_layer(lambda b: b.x0_mix.resid_lambda)
            out["x0_mix_x0"] = per_layer(lambda b: b.x0_mix.x0_lambda)
        if any(b.unet_skip is not None for b in blocks):
            out["unet_skip_weight"] = per_layer(
                lambda b: None if b.unet_skip is None else b.unet_skip.weight)
        if model.backout is not None:
            out["backout_lambda"] = float(model.backout.lam)
        shortcuts = model.embed_shortcuts
        if shortcuts is not None and shortcuts.smear is not None:
            out["smear_lambda"] = float(shortcuts.smear.lam)
    return out


# The gates that depend on the input, by hook point: the probe lines log their mean.
GATE_HOOKS = {"smear_gate": "embed_shortcuts.smear.hook_gate",
              "value_embed_gate": "blocks.{i}.attn.value_embed.hook_gate"}
