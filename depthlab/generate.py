"""Sampling and the next-token view, shared by the CLI and the Hugging Face parity tests.

`generate` keeps a KV cache: the prompt is run once, then each new token is one
forward pass of one token that attends to the cached keys and values of all
earlier ones (through `depthlab.model.decode.DecodeStep` while no hook is attached).
A Gated DeltaNet layer's slot of the cache holds its last conv inputs and its
delta-rule state instead (`depthlab.model.deltanet.DeltaState`): the prompt runs in
chunks, each new token one recurrent step, on the readable forward.
`use_cache=False` recomputes the whole window for every token (the computation the
lesson draws); both give the same tokens. A model sees at most
context_len tokens: once the sequence is longer, every step recomputes the last
context_len tokens at positions 0..context_len-1, with or without the cache.
"""

from __future__ import annotations

import math

import torch

from depthlab.errors import UserError
from depthlab.finite import check_finite_logits
from depthlab.model.attention import KVCache
from depthlab.model.decode import DecodeStep, agrees, step_for, unsupported


class _Stepper:
    """The next token's logits, through the decode step where it may run.

    The step's first token is computed both ways, the step's first (it writes its own
    keys and values into the cache), then the readable forward's over the same cache slot;
    the step is kept only when the two agree (`decode.agrees`). So a model whose readable
    forward computes something the step does not (a change the config cannot show)
    generates on the readable path, and `dropped` says why."""

    def __init__(self, model: torch.nn.Module, cache: KVCache | None, n_tokens: int,
                 device: torch.device) -> None:
        self.model, self.cache, self.device = model, cache, device
        self.step: DecodeStep | None = None
        self.checked, self.dropped = False, None
        if cache is not None and n_tokens > 1:
            self.dropped = unsupported(model, cache)
            if self.dropped is None:
                self.step = step_for(model, cache)

    def __call__(self, seq: list[int]) -> torch.Tensor:
        """Logits [V] for the token after `seq`, feeding only the tokens the cache lacks."""
        model, cache, device = self.model, self.cache, self.device
        if cache is None or len(seq) > model.cfg.context_len:
            window = seq[-model.cfg.context_len:]
            return model(torch.tensor([window], dtype=torch.long, device=device))[0, -1].float()
        step = self.step
        if step is not None and len(seq) == cache.length + 1 and not step.hooks_attached():
            if self.checked:
                return step(seq[-1]).float()
            fast = step(seq[-1]).float()
            cache.length -= 1  # the readable forward rewrites the slot the step just wrote
            readable = self._readable(seq)
            self.checked = True
            if not agrees(fast, readable):
                self.step, self.dropped = None, "its first token differs from the readable forward"
            return readable
        return self._readable(seq)

    def _readable(self, seq: list[int]) -> torch.Tensor:
        cache = self.cache
        new = torch.tensor([seq[cache.length:]], dtype=torch.long, device=self.device)
        return self.model(new, cache=cache, logits_to_keep=1)[0, -1].float()


# Bounds on one request. Without a KV cache every new token is a full forward pass over
# the context, so 10,000 tokens is already minutes for the course model; the prompt
# bound keeps a pasted book from being encoded and held for nothing.
MAX_NEW_TOKENS = 10_000
MAX_PROMPT_TOKENS = 1_000_000


@torch.inference_mode()  # lighter than no_grad: no version counters or views to track
def generate(model: torch.nn.Module, ids: list[int], n_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, greedy: bool = False,
             seed: int | None = None, use_cache: bool = True, run: str = "the model") -> list[int]:
    """The `n_tokens` ids that follow `ids` (the prompt is not repeated).

    greedy: always the most likely token (deterministic, what transformers'
    `do_sample=False` does). Otherwise sample from softmax(logits / temperature),
    restricted to the top_k most likely tokens when top_k is set; `seed` makes
    sampling repeatable. Only the last model.cfg.context_len tokens are seen.
    use_cache: keep keys and values between tokens (same output, far fewer FLOPs).
    run: how a refusal names the model (non-finite logits are refused, not sampled).
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
    check_ids(model, ids)
    vocab = model.cfg.vocab_size
    if seed is not None and not 0 <= seed < 2**64:
        raise UserError(f"--seed must be an integer from 0 to 2^64 - 1, got {seed}")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device)
    if seed is not None:
        generator.manual_seed(seed)
    was_training = model.training
    model.eval()
    context = model.cfg.context_len
    seq = list(ids)
    cache = None
    if use_cache:  # room for what this call can reach, not the whole context (32k for some)
        capacity = min(context, len(ids) + n_tokens)
        cache = KVCache(model.cfg, 1, capacity, next(model.parameters()).dtype, device)
    next_logits = _Stepper(model, cache, n_tokens, device)
    out: list[int] = []
    for _ in range(n_tokens):
        logits = next_logits(seq)
        check_finite_logits(logits, run, f"after {len(seq):,} tokens")
        if greedy:
            nxt = int(logits.argmax())
        else:
            scaled = logits / temperature
            if not torch.isfinite(scaled.max()):  # a temperature so small that the logits
                # overflow (or it rounds to 0 in their dtype): softmax's limit as T -> 0,
                # the most likely tokens, ties sharing
                scaled = torch.where(logits == logits.max(), 0.0, float("-inf"))
            logits = scaled
            if top_k is not None and top_k < vocab:
                kth = torch.topk(logits, top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            nxt = int(torch.multinomial(probs, 1, generator=generator))
        out.append(nxt)
        seq.append(nxt)
    model.train(was_training)
    return out


def check_ids(model: torch.nn.Module, ids: list[int]) -> None:
    """Every prompt id is a row of the model's embedding (a tokenizer.json larger than the
    model's vocabulary can make ids that are not)."""
    vocab = model.cfg.vocab_size
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise UserError(f"token id {bad[0]} is outside the model's vocabulary (0..{vocab - 1})")


@torch.no_grad()
def next_token(model: torch.nn.Module, ids: list[int], top: int = 10, run: str = "the model",
               ) -> tuple[list[tuple[str, tuple[int, ...]]], list[tuple[int, float]]]:
    """The tensor shape after each stage of one forward pass (batch dimension dropped)
    and the `top` most likely next tokens as (id, probability); non-finite logits are
    refused, naming `run`."""
    if not ids:
        raise UserError("the prompt has no tokens")
    check_ids(model, ids)
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
    check_finite_logits(logits[0, -1], run, f"after {seq.shape[1]:,} tokens")
    probs = torch.softmax(logits[0, -1].float(), dim=-1)
    values, indices = torch.topk(probs, min(top, probs.numel()))
    return shapes, [(int(i), float(v)) for i, v in zip(indices, values, strict=True)]
