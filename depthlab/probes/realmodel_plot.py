"""`depthlab probe run --plot`: the real-model probes on one sheet (six panels, matplotlib Agg)."""

from __future__ import annotations

from typing import Any

from depthlab.probes.plots import _save


def plot_realmodel(r: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 3, figsize=(16, 8.5))
    s, a, m, lens, ab = r["stream"], r["attention"], r["massive"], r["lens"], r["ablation"]
    k = list(range(len(s["rms"])))
    nan = lambda xs: [float("nan") if v is None else v for v in xs]

    p = ax[0, 0]
    p.semilogy(k, nan(s["rms"]), label="all tokens")
    p.semilogy(k, nan(s["rms_first_token"]), label="first token")
    p.semilogy(k, nan(s["rms_other_tokens"]), label="other tokens")
    p.semilogy(k, nan(s["rms_expected"]), "k--", label="sqrt(1 + k), scaled to write 1")
    p.set(title="stream RMS after each write", xlabel="write k (0 = embedding)")
    p.legend(fontsize=8)

    p = ax[0, 1]
    p.semilogy(k[1:], nan(s["write_ratio"]), label="|write| / |stream it lands in|")
    p.semilogy(k[1:], nan(s["angular_distance"]), label="angle to previous state / pi")
    p.set(title="how much each write changes the stream", xlabel="write k")
    p.legend(fontsize=8)

    p = ax[0, 2]
    if a is None:  # every layer Gated DeltaNet: no softmax weights
        a = {"layers": [], "layer_share": [], "first_token_share": [], "uniform": float("nan"),
             "heads_above": 0.0, "threshold": 0.3}
    layers = a["layers"]  # a hybrid's attention layers only
    for h, share in enumerate(zip(*a["first_token_share"], strict=True)):
        p.plot(layers, share, ".", color="0.7", label="heads" if h == 0 else None)
    p.plot(layers, a["layer_share"], "o-", label="layer mean")
    p.axhline(a["uniform"], color="k", ls="--", label=f"uniform causal H_T/T = {a['uniform']:.3f}")
    p.set(title=f"attention on the first token ({a['heads_above']:.0%} of heads > {a['threshold']})",
          xlabel="layer", ylim=(0, 1))
    p.legend(fontsize=8)

    p = ax[1, 0]
    p.semilogy(k, m["max_abs"], label="largest |activation|")
    p.semilogy(k, m["median_abs"], label="median |activation|")
    big = m["largest"]
    p.set(title=f"massive activations: {big['value']:.0f} at dim {big['dim']}, token {big['token']}",
          xlabel="state k")
    p.legend(fontsize=8)

    p = ax[1, 1]
    p.plot(k, lens["entropy"], label="entropy (norm recomputed)")
    p.plot(k, lens["entropy_cached_scale"], label="entropy (cached final scale: wrong)")
    q = p.twinx()
    q.plot(k, lens["prob"], "g.-", label="p(target)")
    q.set_ylim(0, 1)
    target = lens.get("target", lens["target_id"])
    p.set(title=f"logit lens at the last token ({r['n_tokens'] - 1}), target {target!r}", xlabel="state k",
          ylabel="nats")
    p.legend(fontsize=8, loc="upper right")
    q.legend(fontsize=8, loc="center right")

    p = ax[1, 2]
    p.bar(list(range(len(ab["delta_loss"]))), ab["delta_loss"])
    p.axhline(0, color="k", lw=0.8)  # where every bar starts
    p.set(title=f"change of the mean next-token loss when block l is skipped "
          f"(base {ab['base_loss']:.2f})", xlabel="block l", ylabel="delta loss (nats)")
    fig.suptitle(f"{r.get('run', '')}: {r['n_tokens']} tokens")
    _save(fig, path)
