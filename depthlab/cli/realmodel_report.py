"""Tables of `depthlab probe run` (the real-model probes), one section per question."""

from __future__ import annotations

from typing import Any


def _f(v: float | None, spec: str) -> str:
    """A number in `spec`, or a dash as wide (a state without a write, a 0/0)."""
    width = spec.split(".")[0]
    return format("-", f">{width}") if v is None else format(v, spec)


def print_realmodel(r: dict[str, Any]) -> None:
    s, a, m, lens, ab = r["stream"], r["attention"], r["massive"], r["lens"], r["ablation"]
    tokens = r.get("tokens")
    shown = " | ".join(repr(t) for t in tokens) if tokens else ",".join(map(str, r["prompt_ids"]))
    print(f"{r['n_tokens']} tokens ({shown}), next-token loss {r['loss']:.4f}, "
          f"{r['n_layers']} blocks = {2 * r['n_layers']} writes")

    print("\nThe residual stream after each write (state k: 0 = embedding, then block.sublayer):")
    print("  RMS beside sqrt(1 + k) scaled to write 1; the first token's RMS apart; |write| / "
          "|stream it lands in|;\n  angle to the previous state / pi; token collapse "
          "(rel. distance from all-equal, mean pairwise cosine)")
    print(f"  {'k':>3} {'state':<9} {'RMS':>10} {'sqrt(1+k)':>10} {'1st tok':>10} {'others':>10} "
          f"{'|w|/|x|':>9} {'angle':>7} {'rel.dist':>9} {'mean cos':>9}")
    for k, name in enumerate(s["states"]):
        w = s["write_ratio"][k - 1] if k else None
        ang = s["angular_distance"][k - 1] if k else None
        print(f"  {k:>3} {name:<9} {_f(s['rms'][k], '10.4g')} {_f(s['rms_expected'][k], '10.4g')} "
              f"{_f(s['rms_first_token'][k], '10.4g')} {_f(s['rms_other_tokens'][k], '10.4g')} "
              f"{_f(w, '9.4f')} {_f(ang, '7.4f')} {_f(s['rel_distance'][k], '9.4f')} "
              f"{_f(s['mean_cosine'][k], '9.4f')}")

    print(f"\nAttention on the first token, mean over the {r['n_tokens']} queries (uniform causal "
          f"attention: H_T/T = {a['uniform']:.4f});\n  {a['n_heads_above']} heads of "
          f"{len(a['first_token_share']) * len(a['first_token_share'][0])} "
          f"({a['heads_above']:.1%}) put more than {a['threshold']} there")
    print(f"  {'layer':>5} {'mean':>7} {'/ uniform':>9}  per head")
    for i, (mean, heads) in enumerate(zip(a["layer_share"], a["first_token_share"], strict=True)):
        print(f"  {i:>5} {mean:7.3f} {mean / a['uniform']:9.2f}  " + " ".join(f"{h:.2f}" for h in heads))

    big = m["largest"]
    print(f"\nMassive activations: largest |activation| {big['value']:.4g} at dim {big['dim']}, "
          f"token {big['token']}, after {big['state']} ({big['ratio']:.4g} x the median)")
    print(f"  {'k':>3} {'state':<9} {'max |x|':>10} {'dim':>5} {'token':>5} {'median':>10} {'ratio':>9}")
    for k, name in enumerate(m["states"]):
        print(f"  {k:>3} {name:<9} {m['max_abs'][k]:10.4g} {m['dim'][k]:>5} {m['token'][k]:>5} "
              f"{m['median_abs'][k]:10.4g} {_f(m['ratio'][k], '9.4g')}")

    target = lens.get("target", lens["target_id"])
    print(f"\nLogit lens at the last token, target {target!r} (id {lens['target_id']}); the final "
          f"norm recomputed on each state;\n  top-1 from {lens['first_top1']}. The cached-scale "
          "entropy divides by the final stream's RMS instead (TransformerLens #1076): wrong")
    print(f"  {'k':>3} {'state':<9} {'rank':>6} {'p(target)':>10} {'entropy':>8} {'cached':>8}  top-1")
    tops = lens.get("top") or lens["top_id"]
    for k, name in enumerate(lens["states"]):
        print(f"  {k:>3} {name:<9} {lens['rank'][k]:>6} {lens['prob'][k]:10.4f} "
              f"{lens['entropy'][k]:8.3f} {lens['entropy_cached_scale'][k]:8.3f}  {tops[k]!r}")

    print("\nGradient of the LM loss arriving at each sublayer's input (bottom first), and the "
          f"loss change when block l's two writes are removed (base loss {ab['base_loss']:.4f}):")
    print(f"  {'sublayer':<10} {'|grad|':>11} {'/ top':>9} {'skip block: dloss':>18}")
    for k, (name, g, rel) in enumerate(zip(r["sublayers"], r["grad_norm"], r["per_layer"],
                                           strict=True)):
        skip = f"{ab['delta_loss'][k // 2]:+18.4f}" if k % 2 == 0 else ""
        print(f"  {name:<10} {g:11.4e} {rel:9.4f} {skip}")
