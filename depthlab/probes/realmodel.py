"""The field's probes of a trained model on real text, read through the hook points.

What the lesson says of large models, measured on any run (course-trained, imported
from Hugging Face or from a GGUF) and one prompt:

- the residual stream grows (RMS after each write, beside sqrt(1 + k) scaled to the
  first write), and differently for the first token;
- deep writes are diluted: each write's norm relative to the stream it lands in, and
  the angle between consecutive residual states (Gromov et al. 2024's arccos/pi);
- the first token soaks up attention (an attention sink, Xiao et al. 2023): its share
  per layer and head against uniform causal attention, H_T / T, and the share of heads
  above 0.3 (Gu et al. 2024), over the softmax-attention layers (`layers`; a hybrid's
  Gated DeltaNet layers have no softmax weights: `deltanet_mixing` gives their effective
  causal mixing matrices instead);
- massive activations (Sun et al. 2024): per layer the largest |activation| in the
  stream, its dimension and token, against the median |activation|;
- token collapse on real text: mean cosine and the distance from all-equal per state;
- the logit lens after every sublayer, with the final norm recomputed on the stream it
  reads; beside it the entropy with the final stream's cached scale, the mistake of
  TransformerLens #1076, which differs;
- how much each block matters: the loss change when its two writes are removed.

Stream states are numbered as in `depthlab.probes.real`: 0 = embedding, k = after write
k (2L writes: block i's attention is write 2i + 1, its FFN write 2i + 2).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from depthlab import rundir
from depthlab.errors import UserError
from depthlab.finite import check_finite_logits, check_finite_weights
from depthlab.locales import marked
from depthlab.memory import check_fits
from depthlab.model.deltanet import chunked_gated_delta_rule
from depthlab.model.residual import stream_view
from depthlab.probes import stream_views as views
from depthlab.probes.simulator import json_list, mean_cosine, rel_distance
from depthlab.probes.stream import probe_model
from depthlab.probes.token_text import bare_ids, pieces, position_labels, token_text
from depthlab.threads import use_threads

SINK_THRESHOLD = 0.3  # Gu et al. 2024: a head "has a sink" when the first token gets more


def uniform_first_share(n_tokens: int) -> float:
    """First-token share of uniform causal attention, averaged over the T queries:
    query t spreads 1/(t + 1) on each key, so the mean is H_T / T."""
    return sum(1.0 / t for t in range(1, n_tokens + 1)) / n_tokens


def _norm_scale(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The per-position factor a norm multiplies by: 1 / RMS (RMSNorm), 1 / std (LayerNorm)."""
    h = x.double()
    if hasattr(norm, "bias"):  # LayerNorm centres first
        h = h - h.mean(-1, keepdim=True)
    return torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.eps).to(x.dtype)


def lens_logits(model: Any, x: torch.Tensor, cached_from: torch.Tensor | None = None,
                logits: torch.Tensor | None = None) -> torch.Tensor:
    """Logits of a stream state read by the final norm and the LM head.

    By default the final norm runs on `x` itself (the correct lens). With `cached_from`
    (the final stream), x is divided by the final stream's scale instead of its own:
    the cached-scale shortcut, wrong for every state but the last. `logits`, the correct
    lens's logits of x when already computed, spare the LM head a second product where
    the head is linear after the norm (no nGPT scale, softcap or hook on hook_final):
    the cached-scale logits are then r (logits - b W^T) + b W^T, r the ratio of scales."""
    norm = model.final_norm
    if cached_from is None or norm is None or not hasattr(norm, "eps"):
        return model.unembed(x) if logits is None else logits  # no norm, or DyT: no scale to cache
    ratio = _norm_scale(norm, cached_from) / _norm_scale(norm, x)
    bias = norm.bias if hasattr(norm, "bias") else 0.0
    weight = model.embed_tokens.weight if model.lm_head is None else model.lm_head.weight
    if (logits is not None and model.logit_scale is None and model.cfg.logit_softcap is None
            and not model.hook_final.active):
        if not torch.is_tensor(bias):
            return logits * ratio
        head_bias = bias @ weight.T
        return (logits - head_bias) * ratio + head_bias
    cached = (norm(x) - bias) * ratio + bias
    return cached @ weight.T


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = logits.double().log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)


def _write_sites(n_layers: int) -> list[str]:
    return [f"blocks.{i}.hook_{kind}_write" for i in range(n_layers) for kind in ("attn", "mlp")]


def _state_sites(n_layers: int) -> list[str]:
    return ["hook_embed"] + [f"blocks.{i}.hook_resid_{s}" for i in range(n_layers)
                             for s in ("mid", "post")]


def state_labels(n_layers: int) -> list[str]:
    return ["embed"] + [f"{i}.{s}" for i in range(n_layers) for s in ("attn", "mlp")]


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> float:
    return F.cross_entropy(logits[0, :-1].double(), ids[0, 1:]).item()


def stream_probes(states: torch.Tensor, writes: torch.Tensor) -> dict[str, Any]:
    """Growth and dilution from the 2L + 1 states [S, T, D] and the 2L writes [W, T, D]."""
    rms_tok = states.pow(2).mean(-1).sqrt()  # [S, T]
    rms = states.pow(2).mean(dim=(-2, -1)).sqrt()
    first = rms[1].item() if len(rms) > 1 else float("nan")
    expected = [None] + [first * math.sqrt((1 + k) / 2) for k in range(1, len(rms))]
    write_ratio = writes.norm(dim=(-2, -1)) / states[:-1].norm(dim=(-2, -1))
    cos = F.cosine_similarity(states[1:], states[:-1], dim=-1).clamp(-1, 1)  # [W, T]
    angle = torch.arccos(cos) / math.pi
    return {"rms": json_list(rms.tolist()), "rms_expected": expected,
            "rms_first_token": json_list(rms_tok[:, 0].tolist()),
            "rms_other_tokens": json_list(rms_tok[:, 1:].pow(2).mean(-1).sqrt().tolist()),
            "rms_per_token": [json_list(r) for r in rms_tok.T.tolist()],
            "write_ratio": json_list(write_ratio.tolist()),
            "angular_distance": json_list(angle.mean(-1).tolist()),
            "angular_distance_other_tokens": json_list(angle[:, 1:].mean(-1).tolist()),
            "rel_distance": json_list(rel_distance(states).tolist()),
            "mean_cosine": json_list(mean_cosine(states).tolist()),
            "mean_cosine_other_tokens": json_list(mean_cosine(states[:, 1:]).tolist())}


def attention_probes(patterns: list[torch.Tensor], layers: list[int] | None = None) -> dict[str, Any]:
    """First-token share per layer and head from the [H, T, T] softmax weights; `layers`
    are the blocks they belong to (default 0..L-1; a hybrid's attention layers only)."""
    T = patterns[0].shape[-1]
    per_head = torch.stack([p[:, :, 0].mean(-1) for p in patterns])  # [L, H]: mean over queries
    uniform = uniform_first_share(T)
    return {"layers": list(range(len(patterns))) if layers is None else list(layers),
            "first_token_share": per_head.tolist(), "layer_share": per_head.mean(-1).tolist(),
            "uniform": uniform, "threshold": SINK_THRESHOLD,
            "heads_above": (per_head > SINK_THRESHOLD).double().mean().item(),
            "n_heads_above": int((per_head > SINK_THRESHOLD).sum())}


DELTA_SITES = ("hook_q", "hook_k", "hook_decay", "hook_beta")  # what the mixing matrix reads


def deltanet_mixing(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor,
                    beta: torch.Tensor) -> torch.Tensor:
    """The effective causal mixing matrix [H, T, T] of a Gated DeltaNet layer for one prompt.

    Given q, k [H, T, Dk], the log decays g and write strengths beta [H, T] (all fixed by
    the prompt), the delta rule's output is linear in the values: o_t = sum_s M[t, s] v_s
    from a zero state. Row t of M is the output when v is the identity (v_s = e_s), so the
    model's own chunked rule run on T one-hot values gives M exactly. It plays the part of
    an attention map, but is no average: entries may be negative and rows need not sum to 1
    (the state forgets and overwrites). It is what reaches the gated norm, before z."""
    T = q.shape[-2]
    eye = torch.eye(T, dtype=torch.float64).expand(q.shape[0], T, T)
    out, _ = chunked_gated_delta_rule(*(t.double()[None] for t in (q, k, eye, g, beta)))
    return out[0]


def mixing_maps(mixes: list[torch.Tensor], layers: list[int]) -> dict[str, Any]:
    """The DeltaNet layers' mixing matrices as attention_maps' lower triangles, in
    thousandths (signed); None past MAX_MAP_TOKENS tokens."""
    T = mixes[0].shape[-1] if mixes else 0
    out = {"layers": layers, "n_tokens": T, "max_tokens": views.MAX_MAP_TOKENS, "scale": 1000}
    if not mixes or T > views.MAX_MAP_TOKENS:
        return out | {"maps": None}
    return out | {"maps": [[[row[: q + 1] for q, row in enumerate(head)]
                            for head in (m * 1000).round().to(torch.int64).tolist()] for m in mixes]}


def massive_probes(states: torch.Tensor, labels: list[str]) -> dict[str, Any]:
    """Per state [S, T, D]: the largest |activation|, its token and dimension, the median."""
    S, T, D = states.shape
    flat = states.abs().reshape(S, -1)
    top, where = flat.max(-1)
    median = flat.median(-1).values
    best = int(top.argmax())
    return {"states": labels, "max_abs": top.tolist(), "token": (where // D).tolist(),
            "dim": (where % D).tolist(), "median_abs": median.tolist(),
            "ratio": json_list((top / median).tolist()),
            "largest": {"state": labels[best], "value": top[best].item(),
                        "token": int(where[best] // D), "dim": int(where[best] % D),
                        "ratio": (top[best] / median[best]).item()}}


def lens_probes(model: Any, states: torch.Tensor, target: int, labels: list[str]) -> dict[str, Any]:
    """Logit lens at the last position of every state: target rank and probability,
    entropy (final norm recomputed) and the cached-scale entropy beside it."""
    last = states[:, -1:, :]  # [S, 1, D]
    raw = lens_logits(model, last)
    logits = raw[:, 0].double()
    cached = lens_logits(model, last, cached_from=last[-1:].expand_as(last), logits=raw)[:, 0].double()
    probs = logits.softmax(-1)
    rank = (logits > logits[:, target:target + 1]).sum(-1).tolist()
    return {"states": labels, "target_id": target, "rank": rank,
            "prob": probs[:, target].tolist(), "top_id": logits.argmax(-1).tolist(),
            "entropy": _entropy(logits).tolist(), "entropy_cached_scale": _entropy(cached).tolist(),
            **lens_reading(rank, labels)}


def lens_reading(rank: list[int], labels: list[str]) -> dict[str, str | None]:
    """When the lens finds the target: `stays_top1`, the state from which it ranks first in
    every state to the end (None when the last state does not rank it first), and
    `first_top1`, the first state where it ranks first at all (None: never). They differ
    when the target reaches first place, loses it and comes back; the first alone would
    then claim more than the lens shows."""
    first = next((k for k, r in enumerate(rank) if r == 0), None)
    stays = len(rank)
    while stays > 0 and rank[stays - 1] == 0:
        stays -= 1
    return {"stays_top1": labels[stays] if stays < len(rank) else None,
            "first_top1": None if first is None else labels[first]}


def lens_sentence(target: str, stays: str | None, first: str | None) -> dict[str, Any]:
    """The lens's reading in every language from `lens_reading`'s two states: the state
    from which the target stays top-1, and the first state it reached top-1 when that
    differs. The target (a token, quoted) is kept apart in "parts" (locales.marked)."""
    code = {"target": target}
    if first is None:
        return marked("rm.read.lens_never", code)
    if stays is None:
        return marked("rm.read.lens_lost", code, first=first)
    if stays == first:
        return marked("rm.read.lens", code, stays=stays)
    return marked("rm.read.lens_back", code, stays=stays, first=first)


ABLATION_BATCH_BYTES = 64 * 2**20  # the logits of one batch of ablated copies, at most


def ablation_probes(model: Any, idx: torch.Tensor, base_loss: float,
                    pre: list[torch.Tensor] | None = None,
                    base_logits: torch.Tensor | None = None) -> dict[str, Any]:
    """Loss change when block l's attention and FFN writes are both removed, for every l.

    `pre`, the stream entering each block in the unablated pass (its hook_resid_pre),
    lets a model whose blocks pass nothing but the stream between them (`_steps_alone`)
    start copy l at block l: the blocks below it compute what the unablated pass did, so
    the L copies cost L(L + 1)/2 block passes, not L^2, in one growing batch that reads
    each block's weights once. Other models run the L copies as batches of whole passes.
    Either way a batch's logits stay under ABLATION_BATCH_BYTES, and only the positions
    that predict a next token go through the LM head.

    Each copy's loss is `copy_losses`' (float32 logits, as the model makes them, reduced
    without a float64 copy of them); the change is taken from the same reduction of
    `base_logits` (the unablated pass's) when given, so a block that writes nothing
    changes the loss by exactly 0, else from `base_loss`."""
    if pre is not None and _steps_alone(model):
        losses = _ablated_from_below(model, idx, pre)
    else:
        losses = _ablated_whole(model, idx)
    ref = base_loss if base_logits is None else float(copy_losses(base_logits[:, :-1], idx)[0])
    deltas = [float(loss) - ref for batch in losses for loss in batch]
    return {"base_loss": base_loss, "delta_loss": deltas}


def copy_losses(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of each copy, float64 [B], from the logits [B, T - 1, V]
    of the positions 0..T-2 of the prompt `idx` [1, T]: logsumexp minus the next token's
    logit. The logsumexp runs on the float32 logits (max-shifted, a cascade sum), about
    1e-7 from float64's for a loss of a few nats; only the per-position results are
    widened."""
    z = logits.float()
    nxt = idx[0, 1:].expand(len(z), -1).unsqueeze(-1)
    return (z.logsumexp(-1).double() - z.gather(-1, nxt)[..., 0].double()).mean(-1)


def _zero_row(row: int):
    """A forward hook that zeroes row `row` of a write (the copy that removes it)."""
    def zero(t: torch.Tensor, _name: str) -> torch.Tensor:
        out = t.clone()
        out[row] = 0
        return out
    return zero


def _steps_alone(model: Any) -> bool:
    """Whether block l's output depends on nothing but its input stream (and the ids):
    no x0 mix, U-Net skip, backout or layer 0's V handed up the stack."""
    m = model.cfg
    return (not m.value_residual and getattr(model, "backout", None) is None
            and all(b.x0_mix is None and b.unet_skip is None for b in model.blocks))


def _ablated_from_below(model: Any, idx: torch.Tensor, pre: list[torch.Tensor]):
    """Losses of the ablated copies, a batch at a time, copy l started at block l from
    `pre[l]`. At block l the batch holds copies 0..l, copy l last: one set of hooks
    (block l zeroes row l) serves the whole climb."""
    T = idx.shape[-1]
    rope = model.rope(T, pre[0])
    x = pre[0][:0]
    fwd = [(f"blocks.{layer}.hook_{kind}_write", _zero_row(layer))
           for layer in range(len(model.blocks)) for kind in ("attn", "mlp")]
    with torch.no_grad(), model.hooks(fwd=fwd):
        for layer, block in enumerate(model.blocks):
            x = torch.cat([x, pre[layer]])  # copy `layer` joins, its own writes removed
            x, _ = block(x, rope, None, None, idx.expand(len(x), T))
    with torch.no_grad():
        x = model.blocks[-1].mlp_residual.close(x)[:, :-1]  # the last position predicts nothing here
        batch = _ablation_batch(model, T)
        for start in range(0, len(x), batch):
            yield copy_losses(model.unembed(x[start:start + batch]), idx)


def _ablated_whole(model: Any, idx: torch.Tensor):
    """Losses of the ablated copies, as batches of whole passes."""
    L, T = model.cfg.n_layers, idx.shape[-1]
    batch = _ablation_batch(model, T)
    for start in range(0, L, batch):
        blocks = range(start, min(L, start + batch))
        fwd = [(f"blocks.{i}.hook_{kind}_write", _zero_row(i - start))
               for i in blocks for kind in ("attn", "mlp")]
        with torch.no_grad(), model.hooks(fwd=fwd):
            logits = model(idx.expand(len(blocks), T))
        yield copy_losses(logits[:, :-1], idx)


def _ablation_batch(model: Any, n_tokens: int) -> int:
    return max(1, min(model.cfg.n_layers, ABLATION_BATCH_BYTES // (n_tokens * model.cfg.vocab_size * 4)))


def realmodel_probes(model: Any, ids: list[int], target: int | None = None,
                     position: int | None = None, run: str = "the model") -> dict[str, Any]:
    """Every probe above for one prompt. `target` is the token the lens follows (default:
    the model's own top-1 next token); `position` the token whose logit is split into
    its writes and whose path is drawn (default: the last; negative counts from the end).
    Non-finite logits are refused, naming `run`, rather than measured as nan."""
    L = model.cfg.n_layers
    if target is not None and not 0 <= target < model.cfg.vocab_size:
        raise UserError(f"target token id must be in [0, {model.cfg.vocab_size}), got {target}")
    if position is not None and not -len(ids) <= position < len(ids):
        raise UserError(f"position must be in [0, {len(ids)}) for this {len(ids)}-token prompt, "
                        f"got {position}")
    pos = len(ids) - 1 if position is None else position % len(ids)
    base = probe_model(model, ids)
    idx = torch.tensor([ids], device=next(model.parameters()).device)
    # softmax weights from the attention layers; a Gated DeltaNet layer (a hybrid's letter
    # L) has none, and gives the inputs of its effective mixing matrix instead
    kinds = model.cfg.layer_kinds
    att = [i for i in range(L) if kinds[i] == "attention"]
    delta = [i for i in range(L) if kinds[i] != "attention"]
    patterns = [f"blocks.{i}.attn.hook_pattern" for i in att]
    delta_sites = [[f"blocks.{i}.attn.{s}" for s in DELTA_SITES] for i in delta]
    pre = [f"blocks.{i}.hook_resid_pre" for i in range(L)]
    sites = (_state_sites(L) + _write_sites(L) + patterns + [s for d in delta_sites for s in d]
             + pre)
    with torch.no_grad():
        logits, cache = model.run_with_cache(idx, names=sites)
    check_finite_logits(logits, run, f"of the {len(ids):,}-token prompt")
    # a widened stream (hc/mhc copies, attnres history) is read as the model reads it out
    states = torch.stack([stream_view(cache[n])[0] for n in _state_sites(L)]).float()
    writes = torch.stack([cache[n][0] for n in _write_sites(L)]).float()
    if target is None:
        target = int(logits[0, -1].argmax())
    labels = state_labels(L)
    loss = next_token_loss(logits, idx)
    maps = [cache[p][0].float() for p in patterns]
    mixes = [deltanet_mixing(*(cache[s][0] for s in d)) for d in delta_sites]
    # `base` holds the gradient per sublayer and the stream summary of `depthlab.probes.real`.
    return {**base, "prompt_ids": list(ids), "n_layers": L,
            "stream": {"states": labels, **stream_probes(states, writes)},
            "attention": attention_probes(maps, att) if att else None,
            "attention_maps": {**views.attention_maps(maps), "kv_heads": model.cfg.kv_heads,
                               "layers": att} if att else None,
            "deltanet_mixing": mixing_maps(mixes, delta) if delta else None,
            "dla": views.direct_logit_attribution(model, states, target, pos,
                                                  float(logits[0, pos, target]), labels),
            "path": {"states": labels, **views.stream_path(states, pos)},
            "lens_grid": views.lens_grid(model, states),
            "massive": massive_probes(states, labels),
            "lens": lens_probes(model, states, target, labels),
            "ablation": ablation_probes(model, idx, loss, [cache[n] for n in pre], logits)}


def probe_run_dir(run_dir: Any, prompt: str | list[int], target: str | int | None = None,
                  device: str = "cpu", threads: int | None = None,
                  position: int | None = None) -> dict[str, Any]:
    """`realmodel_probes` on a run directory. `prompt` is text (the run's tokenizer) or
    token ids; `target` is the lens's token: an id, or text taken verbatim whose first
    token is used (`lens.typed` says how it tokenised); `position` as in
    `realmodel_probes`. `threads` (0: depthlab.threads'
    rule for the run's width) sets torch's threads; None leaves them as they are."""
    model, cfg = rundir.load_model(Path(run_dir), device=device)
    check_finite_weights(model, str(run_dir))
    if threads is not None:
        use_threads(threads, cfg.model.d_model)
    return probe_loaded(model, cfg, rundir.load_tokenizer(Path(run_dir)), run_dir, prompt,
                        target, device, position)


def probe_loaded(model: Any, cfg: Any, tokenizer: Any, run_dir: Any, prompt: str | list[int],
                 target: str | int | None = None, device: str = "cpu",
                 position: int | None = None) -> dict[str, Any]:
    """`probe_run_dir` on a model and tokenizer already loaded from `run_dir` (the page's
    server keeps them between requests)."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise UserError(f"{run_dir} has no {rundir.TOKENIZER_FILE}; give token ids with --ids")
        ids = tokenizer.encode(prompt)
    else:
        ids = list(prompt)
    # learned positions end at context_len: the last tokens, as generate and next-token
    # read them (RoPE has no table to run out of: the whole prompt is measured)
    learned = cfg.model.position == "learned"
    cropped = max(0, len(ids) - cfg.model.context_len) if learned else 0
    ids = ids[cropped:]
    check_fits(cfg, device, training=False, seq=max(1, len(ids)), what=f"{run_dir}/config.json")
    typed = None
    if isinstance(target, str):
        if tokenizer is None:
            raise UserError(f"{run_dir} has no {rundir.TOKENIZER_FILE}; give --target as an id")
        typed = target_tokens(tokenizer, target)  # verbatim: " cold" and "cold" are two tokens
        target = typed["ids"][0]
    out = {"run": str(run_dir), "cropped": cropped,
           **realmodel_probes(model, ids, target, position, run=str(run_dir))}
    if tokenizer is not None:
        # tokens as text: a character split over byte tokens merged, a stray byte as <0xHH>
        out["tokens"] = position_labels(tokenizer, out["prompt_ids"])
        out["token_pieces"] = [p.to_json() for p in pieces(tokenizer, out["prompt_ids"])]
        out["lens"]["target"] = token_text(tokenizer, out["lens"]["target_id"])
        out["lens"]["top"] = [token_text(tokenizer, i) for i in out["lens"]["top_id"]]
        seen = sorted({i for row in out["lens_grid"]["top_id"] for cell in row for i in cell})
        out["lens_grid"]["text"] = {str(i): token_text(tokenizer, i) for i in seen}
    out["lens"]["typed"] = typed
    return out


def target_tokens(tokenizer: Any, text: str) -> dict[str, Any]:
    """How a typed lens target tokenises, taken verbatim (spaces kept): its ids (without a
    BOS the tokenizer may add) and pieces. The lens follows the first token."""
    try:
        ids = bare_ids(tokenizer, text)
    except UserError as e:  # a character the run's vocabulary lacks
        raise UserError(f"target: {e}") from None
    if not ids:
        raise UserError("target: the text encodes to no token")
    return {"text": text, "ids": ids, "pieces": [p.to_json() for p in pieces(tokenizer, ids)]}
