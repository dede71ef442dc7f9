"""Tables of `depthlab probe run` (the real-model probes), one section per question,
each an aligned table with a legend line, like every other probe table."""

from __future__ import annotations

from typing import Any

from depthlab.cli.table import legend, print_lines, table


def _f(v: float | None, spec: str) -> str:
    """A number in `spec`, or a dash (a state without a write, a 0/0)."""
    return "-" if v is None else format(v, spec)


def _stream(r: dict[str, Any]) -> list[str]:
    s = r["stream"]
    rows = []
    for k, name in enumerate(s["states"]):
        w = s["write_ratio"][k - 1] if k else None
        ang = s["angular_distance"][k - 1] if k else None
        rows.append((k, name, _f(s["rms"][k], ".4g"), _f(s["rms_expected"][k], ".4g"),
                     _f(s["rms_first_token"][k], ".4g"), _f(s["rms_other_tokens"][k], ".4g"),
                     _f(w, ".4f"), _f(ang, ".4f"), _f(s["rel_distance"][k], ".4f"),
                     _f(s["mean_cosine"][k], ".4f")))
    return [
        "", "The residual stream after each write:",
        *table(["k", "state", "RMS", "sqrt(1+k)", "1st tok", "others", "|w|/|x|", "angle",
                "rel.dist", "mean cos"], rows, left={1}),
        *legend(("k", "state index, 0 = the embedding"), ("state", "block.sublayer after its write"),
                ("RMS", "the stream's RMS over all tokens"),
                ("sqrt(1+k)", "the growth of k independent unit writes, scaled to write 1"),
                ("1st tok, others", "RMS of the first token's stream and of the rest"),
                ("|w|/|x|", "norm of the write over the norm of the stream it lands in"),
                ("angle", "angle to the previous state, over pi"),
                ("rel.dist", "||X - 1 mean(X)^T||_F / ||X||_F, 0 = all tokens equal"),
                ("mean cos", "mean pairwise cosine of the tokens")),
    ]


def _first(r: dict[str, Any]) -> str:
    return repr(r["tokens"][0]) if r.get("tokens") else f"id {r['prompt_ids'][0]}"


def _deltanet(r: dict[str, Any]) -> list[str]:
    """The line a hybrid's Gated DeltaNet layers get in place of attention rows."""
    d = r.get("deltanet_mixing")
    if d is None:
        return []
    return ["", f"Layers {', '.join(map(str, d['layers']))} are Gated DeltaNet layers: no softmax "
            "weights, so no attention share or map; their effective causal mixing matrices "
            "(o_t = sum_s M[t, s] v_s) are in --json under deltanet_mixing."]


def _attention(r: dict[str, Any]) -> list[str]:
    a = r["attention"]
    if a is None:
        return ["", "No softmax attention layer in this model (every layer is Gated DeltaNet).",
                *_deltanet(r)[1:]]
    n_heads = len(a["first_token_share"]) * len(a["first_token_share"][0])
    rows = [(i, " ".join(f"{h:.2f}" for h in heads), f"{mean:.3f}", f"{mean / a['uniform']:.2f}")
            for i, mean, heads in zip(a["layers"], a["layer_share"], a["first_token_share"],
                                      strict=True)]
    return [*_deltanet(r),
        "", f"Attention on the first token (uniform causal attention: H_T/T = {a['uniform']:.4f}); "
        f"{a['n_heads_above']} heads of {n_heads} ({a['heads_above']:.1%}) put more than "
        f"{a['threshold']} there:",
        *table(["layer", "per head", "mean", "/ uniform"], rows, left={1}),
        *legend(("layer", "block index"), ("mean", f"share of attention on token 0 "
                                                   f"({_first(r)}), mean over heads and the "
                                                   f"{r['n_tokens']} queries"),
                ("/ uniform", "the same over H_T/T"), ("per head", "each head's share")),
    ]


def _massive(r: dict[str, Any]) -> list[str]:
    m = r["massive"]
    big = m["largest"]
    tokens = r.get("tokens")
    text = lambda t: repr(tokens[t]) if tokens else "-"
    rows = [(k, name, f"{m['max_abs'][k]:.4g}", m["dim"][k], m["token"][k], text(m["token"][k]),
             f"{m['median_abs'][k]:.4g}", _f(m["ratio"][k], ".4g"))
            for k, name in enumerate(m["states"])]
    return [
        "", f"Massive activations: largest |activation| {big['value']:.4g} at dim {big['dim']}, "
        f"token {big['token']} ({text(big['token'])}), after {big['state']} "
        f"({big['ratio']:.4g} x the median):",
        *table(["k", "state", "max |x|", "dim", "token", "text", "median", "ratio"], rows,
               left={1, 5}),
        *legend(("k, state", "as above"), ("max |x|", "the largest |activation| in the stream"),
                ("dim, token", "where it sits (tokens numbered from 0)"),
                ("text", "that token as text"), ("median", "the median |activation|"),
                ("ratio", "max |x| over the median")),
    ]


def _typed(lens: dict[str, Any]) -> list[str]:
    """How a typed target tokenised: the lens follows its first token."""
    typed = lens.get("typed")
    if not typed:
        return []
    n = len(typed["ids"])
    shown = " | ".join(repr(p["text"]) for p in typed["pieces"])
    return [f"The target {typed['text']!r} is {n} token{'s' if n > 1 else ''} ({shown}, ids "
            f"{', '.join(map(str, typed['ids']))})" + ("; the lens follows the first." if n > 1 else ".")]


def _lens(r: dict[str, Any]) -> list[str]:
    from depthlab.probes.realmodel import lens_sentence

    lens = r["lens"]
    target = lens.get("target", lens["target_id"])
    tops = lens.get("top") or lens["top_id"]
    rows = [(k, name, repr(tops[k]), lens["rank"][k], f"{lens['prob'][k]:.4f}",
             f"{lens['entropy'][k]:.3f}", f"{lens['entropy_cached_scale'][k]:.3f}")
            for k, name in enumerate(lens["states"])]
    reading = lens_sentence(repr(target), lens["stays_top1"], lens["first_top1"])["en"]
    return [
        "", f"Logit lens at the last token (token {r['n_tokens'] - 1}), target {target!r} "
        f"(id {lens['target_id']}). {reading}", *_typed(lens),
        *table(["k", "state", "top-1", "rank", "p(target)", "entropy", "cached"], rows,
               left={1, 2}),
        *legend(("k, state", "as above"), ("top-1", "the most likely token"),
                ("rank, p(target)", "the target's rank (0 = top-1) and probability when the "
                                    "final norm is recomputed on this state"),
                ("entropy", "of that distribution, nats"),
                ("cached", "the entropy with the final stream's norm scale reused: wrong, "
                           "the TransformerLens #1076 bug")),
    ]


def _text(r: dict[str, Any], i: int) -> str:
    text = (r.get("lens_grid", {}).get("text") or {}).get(str(i))
    return repr(text) if text is not None else f"id {i}"


def _dla(r: dict[str, Any]) -> list[str]:
    d = r["dla"]
    if not d["available"]:
        return ["", f"Direct contributions to the logit: not available ({d['reason']})."]
    target = r["lens"].get("target", d["target_id"]) if d["target_id"] == r["lens"]["target_id"] \
        else d["target_id"]
    rows = [(k, name, f"{c:+.4f}") for k, (name, c) in enumerate(zip(d["terms"], d["contribution"],
                                                                      strict=True))]
    bias = f" + norm bias {d['bias']:+.4f}" if d["norm"] == "layer" else ""
    return [
        "", f"Direct contributions to the logit of {target!r} (id {d['target_id']}) at token "
        f"{d['position']}: the embedding and {len(d['terms']) - 1} writes sum{bias} to "
        f"{d['sum']:.6f}; the model's logit is {d['logit']:.6f} (gap {d['gap']:.2e}, float32 "
        f"rounding bound {d['tolerance']:.1e}). Largest: "
        + ", ".join(f"{t['term']} {t['value']:+.3f}" for t in d["top"]),
        *table(["k", "term", "logit"], rows, left={1}),
        *legend(("k", "term index, 0 = the embedding"),
                ("term", "the embedding, then each write (block.sublayer): what it changed "
                         "the stream by"),
                ("logit", "that change times the final norm's weight over the final "
                          "state's RMS, dotted with the target's unembedding row")),
        f"Path of token {r['path']['position']} on two principal components: they hold "
        f"{r['path']['variance_2d']:.1%} of the variance; the longest step is write "
        f"{r['path']['longest']} ({r['path']['states'][r['path']['longest']]}).",
    ]


def _grid(r: dict[str, Any]) -> list[str]:
    g = r["lens_grid"]
    tokens = r.get("tokens") or [str(i) for i in r["prompt_ids"]]
    names = ["embed" if k == 0 else f"block {k // 2 - 1}" for k in g["states"]]
    rows = [(name, *(f"{_text(r, cell[0][0])} {cell[1][0]:.2f}"
                     for cell in zip(ids, probs, strict=True)))
            for name, ids, probs in zip(names, g["top_id"], g["top_prob"], strict=True)]
    return [
        "", "Logit-lens grid: the top-1 token and its probability at every block output "
        "(rows) and position (columns), final norm recomputed:",
        *table(["state", *(f"{t}:{s!r}" for t, s in enumerate(tokens))], rows, left={0}),
    ]


def _gradient(r: dict[str, Any]) -> list[str]:
    ab = r["ablation"]
    rows = [(name, f"{g:.4e}", f"{rel:.4f}")
            for name, g, rel in zip(r["sublayers"], r["grad_norm"], r["per_layer"], strict=True)]
    return [
        "", "Gradient of the mean next-token loss at each sublayer's input (bottom first):",
        *table(["sublayer", "|grad|", "/ top"], rows, left={0}),
        *legend(("sublayer", "block.sublayer, bottom first"),
                ("|grad|", "norm of dLoss/d(the sublayer's input)"),
                ("/ top", "the same over the top sublayer's")),
        "", f"Skipping one block (base loss {ab['base_loss']:.4f}):",
        *table(["block", "dloss"], [(i, f"{d:+.4f}") for i, d in enumerate(ab["delta_loss"])]),
        *legend(("block", "the block whose two writes are removed"),
                ("dloss", f"the change of the mean next-token loss over the {r['n_tokens'] - 1} "
                          "predictions, nats")),
    ]


def _pieces(r: dict[str, Any]) -> str:
    """The prompt as numbered text: `3 'The'`, and `4-5 '国'` for a character over two tokens."""
    if not r.get("token_pieces"):
        return ", ".join(map(str, r["prompt_ids"]))
    at = lambda p: str(p["start"]) if p["stop"] - p["start"] == 1 else f"{p['start']}-{p['stop'] - 1}"
    return " | ".join(f"{at(p)} {p['text']!r}" for p in r["token_pieces"])


def print_realmodel(r: dict[str, Any]) -> None:
    n = r["n_tokens"]
    print_lines([f"{n} tokens, numbered from 0 ({_pieces(r)}); a character split over byte "
                 "tokens is shown once, a byte that is no whole character as <0xHH>",
                 f"next-token loss {r['loss']:.4f}: the mean over the {n - 1} predictions "
                 f"(tokens 1 to {n - 1}, each from the tokens before it); "
                 f"{r['n_layers']} blocks = {2 * r['n_layers']} writes",
                 *_stream(r), *_attention(r), *_massive(r), *_lens(r), *_dla(r), *_grid(r),
                 *_gradient(r)])
