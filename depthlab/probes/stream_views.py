"""The residual stream as a sum of writes, in pictures a learner can read.

The lesson's equation x_L = x_0 + sum_k F_k(...) measured on a trained model, for one
prompt, from the states `depthlab.probes.realmodel` already caches:

- direct logit attribution (TransformerLens's `logit_attrs`): the final stream at one
  position is the embedding plus every write, and the final norm is linear once its
  per-position scale (1 / RMS of the final state, eps included) is frozen, so the
  target's logit splits exactly into one term per write, plus the norm's bias if it
  has one. The terms are summed here and set beside the model's own logit: the gap
  is float rounding, and it is reported, never hidden;
- the stream's path: the chosen token's state after every write, projected onto the
  two principal components of the prompt's states, each write an arrow;
- the logit-lens grid: the lens's top tokens at every block output and every position;
- attention maps: every layer's and head's query x key softmax weights.

A "write" here is what the stream changed by: state k minus state k - 1. With the
plain residual (x + F(x)) that is the sublayer's write itself (up to the float32
addition's rounding); with deepnorm's alpha, Post-LN's norm after the add or a widened
stream it is the change the model actually made, so the terms always sum to the final
stream.
"""

from __future__ import annotations

import math
from typing import Any

import torch

EPS32 = float(torch.finfo(torch.float32).eps)
EPS64 = float(torch.finfo(torch.float64).eps)
TOP_K = 5  # lens grid: the top tokens kept per cell for the hover
MAX_MAP_TOKENS = 64  # attention maps are kept for prompts up to this length (size of the answer)


def _norm_parts(model: Any) -> tuple[str, torch.Tensor | None, torch.Tensor | None, float] | None:
    """The final norm as (kind, weight, bias, eps) in float64, or None when it is not
    linear at a frozen scale (DyT's tanh)."""
    norm = model.final_norm
    if norm is None:
        return "none", None, None, 0.0
    if hasattr(norm, "scale") and not hasattr(norm, "bias"):  # RMSNorm (zero-centred too)
        return "rms", norm.scale().detach().double(), None, float(norm.eps)
    if hasattr(norm, "bias") and hasattr(norm, "eps"):  # LayerNorm
        return "layer", norm.weight.detach().double(), norm.bias.detach().double(), float(norm.eps)
    return None


def _unembed_row(model: Any, target: int) -> torch.Tensor:
    weight = model.embed_tokens.weight if model.lm_head is None else model.lm_head.weight
    return weight[target].detach().double()


@torch.no_grad()
def direct_logit_attribution(model: Any, states: torch.Tensor, target: int, position: int,
                             real_logit: float, labels: list[str]) -> dict[str, Any]:
    """Each term's direct contribution to `target`'s logit at `position`.

    states [S, T, D] (S = 2L + 1, state 0 the embedding). Term 0 is the embedding, term k
    the change write k made. Contribution_k = (term_k (centred, for LayerNorm) * scale *
    norm weight) . W_U[target], scale = 1 / sqrt(mean(x_final^2) + eps) of the final state.
    `tolerance` bounds the gap from float32 rounding of the model's own logit: D * eps32
    times the sum of |normalised final state * W_U[target]| (the dot product's condition).
    model.backout's subtraction after the last write is one more term ("backout"); nGPT's
    per-token logit scale multiplies every term; with a logit softcap the terms sum to
    the logit before the cap (`logit` is then that, recovered with atanh)."""
    parts = _norm_parts(model)
    if parts is None:
        return {"available": False, "reason": "the final norm (DyT) is not linear at a fixed scale"}
    kind, weight, bias, eps = parts
    x = states[:, position].double()  # [S, D]
    terms = torch.cat([x[:1], x[1:] - x[:-1]])  # embedding, then each write's change
    u = _unembed_row(model, target)
    final = x[-1]
    backout = getattr(model, "backout", None)
    if backout is not None:  # model.backout: x - lambda * x_mid after the last write, a term too
        took = -float(backout.lam) * x[2 * (backout.layer + 1)]
        terms, final, labels = torch.cat([terms, took[None]]), final + took, [*labels, "backout"]
    scale_z = getattr(model, "logit_scale", None)
    if scale_z is not None:  # nGPT's s_z: one factor per vocabulary entry, linear
        u = u * float(scale_z.s_z()[target])
    cap = getattr(model.cfg, "logit_softcap", None)
    if cap is not None:  # the terms sum to the logit before cap * tanh(logit / cap)
        real_logit = cap * math.atanh(max(-1.0, min(1.0, real_logit / cap)))
    D = final.shape[-1]
    if kind == "layer":
        terms = terms - terms.mean(-1, keepdim=True)
        centred = final - final.mean()
        scale = torch.rsqrt(centred.pow(2).mean() + eps)
        normed = centred * scale * weight + bias
    elif kind == "rms":
        scale = torch.rsqrt(final.pow(2).mean() + eps)
        normed = final * scale * weight
    else:
        scale = torch.tensor(1.0, dtype=torch.float64)
        normed = final
    direction = u * (weight if weight is not None else 1.0) * scale
    contrib = terms @ direction  # [S]
    bias_term = float(bias @ u) if bias is not None else 0.0
    total = float(contrib.sum()) + bias_term
    tolerance = (D * EPS32 * float((normed * u).abs().sum())  # the model's float32 logit
                 + len(contrib) * EPS64 * float(contrib.abs().sum()))  # this float64 sum
    order = sorted(range(len(contrib)), key=lambda k: -abs(float(contrib[k])))
    return {"available": True, "position": position, "target_id": target, "terms": labels,
            "contribution": [float(c) for c in contrib], "bias": bias_term, "sum": total,
            "logit": real_logit, "gap": total - real_logit, "tolerance": tolerance,
            "final_scale": float(scale), "norm": kind, "softcap": cap,
            "top": [{"term": labels[k], "k": k, "value": float(contrib[k])} for k in order[:5]]}


def stream_path(states: torch.Tensor, position: int) -> dict[str, Any]:
    """The token's state after every write, on the two principal components of the
    prompt's states [S, T, D] (centred; SVD), and the share of variance they hold.

    The fit leaves out the first token's states (unless it is the token drawn or the
    prompt has two tokens): in a trained model that token carries massive activations
    (Sun et al. 2024) a hundred times the others', which would be the whole first
    component and flatten every other token's path onto a point. `fit_first_token`
    says which was done."""
    use_first = position == 0 or states.shape[1] <= 2
    fit = states if use_first else states[:, 1:]
    flat = fit.double().reshape(-1, states.shape[-1])
    mean = flat.mean(0)
    centred = flat - mean
    if centred.shape[0] >= centred.shape[1] * 11 // 6:
        # LAPACK's gesdd factors a matrix this tall as QR first and takes the SVD of R;
        # doing that here gives the same singular values and vectors (signs included)
        # without forming the [S*T, D] left vectors, which were most of its cost
        centred = torch.linalg.qr(centred, mode="r")[1]
    _, sing, vh = torch.linalg.svd(centred, full_matrices=False)
    var = sing.pow(2)
    total = float(var.sum())
    xy = (states[:, position].double() - mean) @ vh[:2].T  # [S, 2]
    if xy.shape[1] < 2:  # a one-dimensional stream: the second axis is 0
        xy = torch.cat([xy, torch.zeros_like(xy)], dim=1)
    origin = -mean @ vh[:2].T  # the zero vector: where the embedding's arrow starts
    if origin.shape[0] < 2:
        origin = torch.cat([origin, torch.zeros_like(origin)])
    share = [float(v) / total if total > 0 else 0.0 for v in var[:2]]
    step = (xy[1:] - xy[:-1]).norm(dim=-1)
    return {"position": position, "fit_first_token": use_first,
            "x": [round(float(v), 4) for v in xy[:, 0]], "y": [round(float(v), 4) for v in xy[:, 1]],
            "origin": [round(float(v), 4) for v in origin],
            "variance": [round(v, 4) for v in share], "variance_2d": sum(share),
            "longest": int(step.argmax()) + 1 if len(step) else 0}


LENS_BATCH_BYTES = 64 * 2**20  # the float32 logits of one batch of lens-grid rows, at most


@torch.no_grad()
def lens_grid(model: Any, states: torch.Tensor) -> dict[str, Any]:
    """The logit lens (final norm recomputed on each state) at every block output
    (rows: the embedding, then block 0..L-1's output, i.e. states 0, 2, 4, ..., 2L)
    and every position (columns): the top-5 ids and probabilities per cell."""
    rows = list(range(0, states.shape[0], 2))
    # Rows go through the LM head together, as many as keep their logits under
    # LENS_BATCH_BYTES: its weights are read once a batch, not once a row (SmolLM2: 31
    # reads of 113 MB). Softmax is monotonic, so the top-5 are the logits' top-5, and
    # only their probabilities are taken (exp(logit - logsumexp)).
    batch = max(1, LENS_BATCH_BYTES // (states.shape[1] * model.cfg.vocab_size * 4))
    ids, probs = [], []
    for start in range(0, len(rows), batch):
        logits = model.unembed(states[rows[start:start + batch]])  # the norm runs on each state  # [R, T, V]
        top = logits.topk(TOP_K, dim=-1)
        # the logsumexp of the float32 logits (about 1e-7 from float64's), then the
        # five probabilities in double: a float64 copy of every logit cost more than the rest
        p = (top.values.double() - logits.float().logsumexp(-1, keepdim=True).double()).exp()
        ids += top.indices.tolist()
        probs += [[[round(v, 4) for v in cell] for cell in row] for row in p.tolist()]
    return {"states": rows, "top_id": ids, "top_prob": probs}


def attention_maps(patterns: list[torch.Tensor]) -> dict[str, Any]:
    """Every layer's and head's [T, T] softmax weights as the lower triangle (row q holds
    keys 0..q), in thousandths; None past MAX_MAP_TOKENS tokens. `row_sum_error` is the
    largest |row sum - 1| of the full-precision weights (0 up to rounding)."""
    T = patterns[0].shape[-1]
    err = max(float((p.double().sum(-1) - 1).abs().max()) for p in patterns)
    if T > MAX_MAP_TOKENS:
        return {"n_tokens": T, "maps": None, "max_tokens": MAX_MAP_TOKENS, "row_sum_error": err}
    maps = [[[row[: q + 1] for q, row in enumerate(head)]
             for head in (p.double() * 1000).round().to(torch.int64).tolist()] for p in patterns]
    return {"n_tokens": T, "maps": maps, "max_tokens": MAX_MAP_TOKENS, "row_sum_error": err,
            "scale": 1000}
