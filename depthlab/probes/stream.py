"""The one reading of the residual stream: its RMS after each write, the gradient that
reaches each sublayer or block, and token collapse.

Three callers ask these questions, and all of them read the answers here:
  - `depthlab.probes.real`: a model at init, in float64 (`stream_measures`);
  - `probe_model` below: a trained or imported run on the learner's prompt
    (`depthlab probe run`, alias `depthlab hf probe`);
  - the trainer's probe lines in metrics.jsonl (`training_probe`).
Every stream state passes through `reduce_stream`, so a residual design whose stream is
wider than [B, T, D] changes the reading in one place.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from depthlab.errors import UserError
from depthlab.hooks import ActivationCache
from depthlab.model.residual import stream_view
from depthlab.probes.simulator import mean_cosine, rel_distance


def reduce_stream(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One stream state, batched, reduced for the probes: (rms, tokens).

    x is [B, T, D], or wider for residuals that carry more than one stream: [B, T, n, D]
    for the n copies of hc/mhc, [B, T, k, D] for attnres's history of writes. tokens is
    `depthlab.model.residual.stream_view(x)` ([B, T, D]: the sum along the third axis,
    what the model itself reads out at the end); rms (0-dim) and token collapse are
    measured on it, so every residual is read the way its own stack would be read.
    """
    tokens = stream_view(x)
    return tokens.pow(2).mean().sqrt(), tokens


def collapse(tokens: torch.Tensor) -> dict[str, list[float]]:
    """Token collapse of stream states [S, T, D] (tokens of `reduce_stream`, one sequence):
    relative distance from 'all tokens identical' and mean pairwise cosine, per state."""
    return {"rel_distance": rel_distance(tokens).tolist(),
            "mean_cosine": mean_cosine(tokens).tolist()}


def stream_sites(n_layers: int) -> tuple[list[str], list[str]]:
    """Hook names of the stream each sublayer reads (2L, bottom first) and of the stream
    after each of the 2L writes."""
    reads, writes = [], []
    for i in range(n_layers):
        reads += [f"blocks.{i}.hook_resid_pre", f"blocks.{i}.hook_resid_mid"]
        writes += [f"blocks.{i}.hook_resid_mid", f"blocks.{i}.hook_resid_post"]
    return reads, writes


def stream_measures(cache: ActivationCache, n_layers: int, first: torch.Tensor) -> dict[str, Any]:
    """From a `run_with_cache(names=stream_sites(...), grad_of=...)` of one sequence: the
    gradient norm at the stream each sublayer reads (and relative to the top one), and RMS
    and token collapse of each stream state (2L + 1: `first`, then after each write)."""
    reads, writes = stream_sites(n_layers)
    norms = torch.stack([cache.grads[n].double().norm() for n in reads])  # all entries of a wide stream
    opened = cache[reads[0]]  # the stream as the stack opened it: `first` itself, or its copies
    first = first if opened.ndim == 3 else opened
    states = [reduce_stream(s.double()) for s in [first.detach(), *(cache[n] for n in writes)]]
    per_layer = norms / norms[-1]
    return {"sublayers": [f"{i}.{kind}" for i in range(n_layers) for kind in ("attn", "mlp")],
            "grad_norm": norms.tolist(), "per_layer": per_layer.tolist(),
            "ratio": float(per_layer[0]),
            "stream_rms": [rms.item() for rms, _ in states],
            **collapse(torch.stack([tokens[0] for _, tokens in states]))}


def training_probe(model: Any, x: torch.Tensor, y: torch.Tensor,
                   loss_fn: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """Stream RMS after each write and per-block gradient norms on a training batch.

    Returns the logits and {"loss", "resid_rms" (2L + 1: embedding, then after each
    write), "grad_resid_pre" (|dLoss/dx| at blocks.{i}.hook_resid_pre: the gradient block
    i receives from everything above it), "grad_params" (norm of block i's parameter
    gradients)}; a widened stream's RMS is that of `reduce_stream`. Computed with
    autograd.grad, so the .grad fields, which the next optimizer step reads, stay untouched.
    """
    L = len(model.blocks)
    acts: dict[str, torch.Tensor] = {}

    def keep(t: torch.Tensor, name: str) -> None:
        acts[name] = t

    _, writes = stream_sites(L)
    writes = ["blocks.0.hook_resid_pre", *writes]  # the stream as opened, then after each write
    pre = [f"blocks.{i}.hook_resid_pre" for i in range(L)]
    with torch.enable_grad(), model.hooks(fwd=[(n, keep) for n in dict.fromkeys(writes + pre)]):
        logits = model(x)
        loss = loss_fn(logits, y)
        params = [list(b.parameters()) for b in model.blocks]
        grads = torch.autograd.grad(loss, [acts[n] for n in pre] + [p for ps in params for p in ps],
                                    allow_unused=True)
    param_grads = iter(grads[L:])
    grad_params = []
    for ps in params:
        sq = sum(float(g.float().pow(2).sum()) for g in (next(param_grads) for _ in ps)
                 if g is not None)
        grad_params.append(math.sqrt(sq))
    return logits, {"loss": loss.item(),
                    "resid_rms": [reduce_stream(acts[n].detach().float())[0].item()
                                  for n in writes],
                    "grad_resid_pre": [g.float().norm().item() for g in grads[:L]],
                    "grad_params": grad_params}


def probe_model(model: Any, ids: list[int]) -> dict[str, Any]:
    """Stream growth, gradient reach and token collapse of a loaded model on one prompt.

    Laid out like `depthlab.probes.real_probe` (which asks the same of a model at
    init): per sublayer l (2L, bottom first) the gradient norm of the LM loss at the
    stream it reads (`blocks.i.hook_resid_pre` for attention, `hook_resid_mid` for
    the FFN); per stream state (2L + 1, 0 = embedding, k = after write k) its RMS and
    the token-collapse measures.
    """
    if len(ids) < 2:
        raise UserError(f"the prompt needs at least 2 tokens, got {len(ids)}")
    vocab = model.cfg.vocab_size
    if min(ids) < 0 or max(ids) >= vocab:
        raise UserError(f"token ids must be in [0, {vocab}), got {min(ids)}..{max(ids)}")
    L = model.cfg.n_layers
    idx = torch.tensor([ids], device=next(model.parameters()).device)
    reads, writes = stream_sites(L)

    def lm_loss(logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits[0, :-1].float(), idx[0, 1:])

    # Gradients with respect to the stream only: parameters are frozen for the pass and
    # the embedding output becomes the leaf, so a real model needs no parameter-sized grads.
    def make_leaf(x: torch.Tensor, _name: str) -> torch.Tensor:
        return x.detach().requires_grad_(True)

    was_training = model.training
    frozen = [p for p in model.parameters() if p.requires_grad]
    model.eval()
    try:
        for p in frozen:
            p.requires_grad_(False)
        with model.hooks(fwd=[("hook_embed", make_leaf)]):
            logits, cache = model.run_with_cache(
                idx, names=["hook_embed", *dict.fromkeys(reads + writes)], grad_of=lm_loss)
    finally:
        for p in frozen:
            p.requires_grad_(True)
        model.train(was_training)

    return {"kind": "checkpoint", "n_tokens": len(ids), "loss": lm_loss(logits.detach()).item(),
            **stream_measures(cache, L, cache["hook_embed"])}

