"""Sampling and the next-token view, shared by the CLI and the Hugging Face parity tests.

`generate` runs the full forward pass for every new token (no KV cache): slower,
but it is the same computation the lesson draws, and the models are small.
"""

from __future__ import annotations

import math

import torch

from depthlab.errors import UserError

# Bounds on one request. Without a KV cache every new token is a full forward pass over
# the context, so 10,000 tokens is already minutes for the course model; the prompt
# bound keeps a pasted book from being encoded and held for nothing.
MAX_NEW_TOKENS = 10_000
MAX_PROMPT_TOKENS = 1_000_000


@torch.no_grad()
def generate(model: torch.nn.Module, ids: list[int], n_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, greedy: bool = False,
             seed: int | None = None) -> list[int]:
    """The `n_tokens` ids that follow `ids` (the prompt is not repeated).

    greedy: always the most likely token (deterministic, what transformers'
    `do_sample=False` does). Otherwise sample from softmax(logits / temperature),
    restricted to the top_k most likely tokens when top_k is set; `seed` makes
    sampling repeatable. Only the last model.cfg.context_len tokens are seen.
    """
    if not ids:
        raise UserError("generation needs at least one prompt token")
    if not 0 <= n_tokens <= MAX_NEW_TOKENS:
        raise UserError(f"--tokens must be between 0 and {MAX_NEW_TOKENS:,}, got {n_tokens}")
    if not greedy and not (math.isfinite(temperature) and temperature > 0):
        raise UserError(f"--temperature must be a finite number > 0, got {temperature} "
                        "(use --greedy for the most likely token)")
    if len(ids) > MAX_PROMPT_TOKENS:
        raise UserError(f"the prompt has {len(ids):,} tokens; at most {MAX_PROMPT_TOKENS:,}")
    vocab = model.cfg.vocab_size
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise UserError(f"token id {bad[0]} is outside the model's vocabulary (0..{vocab - 1})")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device)
    if seed is not None:
        generator.manual_seed(seed)
    was_training = model.training
    model.eval()
    seq = torch.tensor([ids], dtype=torch.long, device=device)
    out: list[int] = []
    for _ in range(n_tokens):
        logits = model(seq[:, -model.cfg.context_len:])[0, -1].float()
        if greedy:
            nxt = int(logits.argmax())
        else:
            logits = logits / temperature
            if top_k is not None and top_k < vocab:
                kth = torch.topk(logits, top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            nxt = int(torch.multinomial(probs, 1, generator=generator))
        out.append(nxt)
        seq = torch.cat([seq, torch.tensor([[nxt]], device=device)], dim=1)
    model.train(was_training)
    return out


@torch.no_grad()
def next_token(model: torch.nn.Module, ids: list[int],
               top: int = 10) -> tuple[list[tuple[str, tuple[int, ...]]], list[tuple[int, float]]]:
    """The tensor shape after each stage of one forward pass (batch dimension dropped)
    and the `top` most likely next tokens as (id, probability)."""
    if not ids:
        raise UserError("the prompt has no tokens")
    L = model.cfg.n_layers
    stages = ["hook_embed"] + [f"blocks.{i}.hook_resid_post" for i in range(L)] + ["hook_final"]
    shapes: list[tuple[str, tuple[int, ...]]] = []

    def record(t: torch.Tensor, name: str) -> None:
        shapes.append((name, tuple(t.shape[1:])))

    model.eval()
    seq = torch.tensor([ids[-model.cfg.context_len:]], dtype=torch.long,
                       device=next(model.parameters()).device)
    with model.hooks(fwd=[(s, record) for s in stages]):
        logits = model(seq)
    shapes.append(("logits", tuple(logits.shape[1:])))
    probs = torch.softmax(logits[0, -1].float(), dim=-1)
    values, indices = torch.topk(probs, min(top, probs.numel()))
    return shapes, [(int(i), float(v)) for i, v in zip(indices, values, strict=True)]
