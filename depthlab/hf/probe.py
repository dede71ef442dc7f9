"""The lesson's three measurements on a loaded run (a pretrained import or a trained run).

For the learner's own prompt: how the residual stream grows (RMS after each
write), how much of the LM loss's gradient arrives at each block, and whether
the tokens' representations collapse onto one direction with depth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from depthlab import rundir
from depthlab.errors import UserError


def stream_rms(x: torch.Tensor) -> float:
    """sqrt(mean(x^2)) over every token and channel of a stream [B, T, D]."""
    return x.double().pow(2).mean().sqrt().item()


def collapse(x: torch.Tensor) -> tuple[float, float]:
    """(||X - 1 mean(X)^T||_F / ||X||_F, mean pairwise cosine) of one sequence X [T, D].

    The first is 1 for tokens with zero mean and 0 when every token is the same
    vector (rank collapse, Dong et al. 2021); the second is 1 when all tokens point
    the same way.
    """
    x = x.double()
    centred = x - x.mean(dim=0, keepdim=True)
    ratio = (centred.norm() / x.norm().clamp_min(1e-300)).item()
    unit = F.normalize(x, dim=-1)
    cos = unit @ unit.T
    n = x.shape[0]
    mean_cos = ((cos.sum() - cos.diagonal().sum()) / (n * (n - 1))).item()
    return ratio, mean_cos


def encode_prompt(run_dir: Path, text: str) -> list[int]:
    """Token ids of `text` with the run's tokenizer.json (Hugging Face `tokenizers`)."""
    path = Path(run_dir) / rundir.TOKENIZER_FILE
    if not path.exists():
        raise UserError(f"{run_dir} has no {rundir.TOKENIZER_FILE}; give token ids with --ids")
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception
        raise UserError(f"{path}: not a Hugging Face tokenizers file ({e})") from None
    return tokenizer.encode(text).ids


def probe_model(model: Any, ids: list[int]) -> dict[str, Any]:
    """Stream growth, gradient reach and collapse of `model` on one prompt."""
    if len(ids) < 2:
        raise UserError(f"the prompt needs at least 2 tokens, got {len(ids)}")
    vocab = model.cfg.vocab_size
    if min(ids) < 0 or max(ids) >= vocab:
        raise UserError(f"token ids must be in [0, {vocab}), got {min(ids)}..{max(ids)}")
    n_layers = model.cfg.n_layers
    idx = torch.tensor([ids], device=next(model.parameters()).device)
    names = ["hook_embed"] + [f"blocks.{i}.hook_{s}" for i in range(n_layers)
                              for s in ("resid_pre", "resid_mid", "resid_post")]

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
            logits, cache = model.run_with_cache(idx, names=names, grad_of=lm_loss)
    finally:
        for p in frozen:
            p.requires_grad_(True)
        model.train(was_training)
    loss = lm_loss(logits.detach()).item()

    writes = [{"write": 0, "site": "hook_embed", "rms": stream_rms(cache["hook_embed"])}]
    layers = []
    embed_ratio, embed_cos = collapse(cache["hook_embed"][0])
    layers.append({"layer": 0, "site": "hook_embed", "centred_ratio": embed_ratio,
                   "mean_cosine": embed_cos})
    grads = []
    for i in range(n_layers):
        for k, site in enumerate(("resid_mid", "resid_post")):
            name = f"blocks.{i}.hook_{site}"
            writes.append({"write": 2 * i + k + 1, "site": name, "rms": stream_rms(cache[name])})
        ratio, cos = collapse(cache[f"blocks.{i}.hook_resid_post"][0])
        layers.append({"layer": i + 1, "site": f"blocks.{i}.hook_resid_post",
                       "centred_ratio": ratio, "mean_cosine": cos})
        grad = cache.grads[f"blocks.{i}.hook_resid_pre"]
        grads.append({"block": i, "site": f"blocks.{i}.hook_resid_pre",
                      "grad_norm": grad.double().norm().item()})
    return {"n_tokens": len(ids), "loss": loss, "stream_growth": writes,
            "gradient_reach": grads, "collapse": layers}


def probe_run(run_dir: Path, prompt: str | list[int], device: str = "cpu") -> dict[str, Any]:
    """`probe_model` on a run directory; `prompt` is text (run's tokenizer) or token ids."""
    ids = encode_prompt(run_dir, prompt) if isinstance(prompt, str) else list(prompt)
    model, _ = rundir.load_model(Path(run_dir), device=device)
    return {"run": str(run_dir), "prompt_ids": ids, **probe_model(model, ids)}
