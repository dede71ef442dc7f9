"""The lesson's three measurements on a loaded run (a pretrained import or a trained run).

For the learner's own prompt: how the residual stream grows (RMS after each
write), how much of the LM loss's gradient arrives at each sublayer, and whether
the tokens' representations collapse onto one direction with depth. The metric
formulas are the probes package's, so init and pretrained numbers compare.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from depthlab import rundir
from depthlab.errors import UserError


def encode_prompt(run_dir: Path, text: str) -> list[int]:
    """Token ids of `text` with the run's tokenizer (a Hugging Face or a depthlab one)."""
    tokenizer = rundir.load_tokenizer(Path(run_dir))
    if tokenizer is None:
        raise UserError(f"{run_dir} has no {rundir.TOKENIZER_FILE}; give token ids with --ids")
    return tokenizer.encode(text)


def probe_model(model: Any, ids: list[int]) -> dict[str, Any]:
    """Stream growth, gradient reach and token collapse of `model` on one prompt.

    Laid out like `depthlab.probes.real_probe` (which asks the same of a model at
    init): per sublayer l (2L, bottom first) the gradient norm of the LM loss at the
    stream it reads (`blocks.i.hook_resid_pre` for attention, `hook_resid_mid` for
    the FFN); per stream state (2L + 1, 0 = embedding, k = after write k) its RMS and
    the token-collapse measures.
    """
    from depthlab.probes.real import stream_measures, stream_sites

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


def probe_run(run_dir: Path, prompt: str | list[int], device: str = "cpu") -> dict[str, Any]:
    """`probe_model` on a run directory; `prompt` is text (run's tokenizer) or token ids."""
    model, _ = rundir.load_model(Path(run_dir), device=device)  # names a missing run first
    ids = encode_prompt(run_dir, prompt) if isinstance(prompt, str) else list(prompt)
    return {"run": str(run_dir), "prompt_ids": ids, **probe_model(model, ids)}
