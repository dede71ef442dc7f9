"""The Gated DeltaNet sublayer against the course attention sublayer, forward and backward,
side by side in one process; and its chunked form against its recurrent form.

Both sublayers are the `qwen3_5` preset's at course width (d 128): attention with 4 heads
of 32, 2 K/V heads, QK-norm and the output gate; the DeltaNet with 4 key / 8 value heads
of 32 and a 4-tap conv. Each round times one forward + backward of each on the same
input [B, T, 128] (B * T = 4,096 tokens, so every context sees the same tokens), in
alternating order, with time.thread_time; the printed ratios are medians over rounds of
ratios taken within a round. Attention's cost per token grows with T (its T x T scores);
the chunked DeltaNet's does not (64 x 64 blocks and a state per chunk), so the ratio
falls as the context grows. The recurrent form (one token at a time, what a decode step
runs) is timed at the longest context against the chunked one.

Two parts of the DeltaNet layer are then timed against the form they replaced, at the
shortest context (a course training step): the depthwise causal conv as K shifted
multiply-adds against F.conv1d(groups=C) with the transposes it needs, and the chunked
rule started from no state (the first chunk skips its products with the zero state)
against the same rule given a zero state (every product made), forward + backward.

    python bench/deltanet_step.py [--rounds 7] [--threads 1] [--contexts 64,256,1024]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from depthlab.model.attention import Attention
from depthlab.model.deltanet import GatedDeltaNet, chunked_gated_delta_rule, l2_normalize
from depthlab.model.transformer import Transformer
from depthlab.presets import get_preset

TOKENS = 4096


def fwd_bwd(fn, x: torch.Tensor) -> float:
    """thread_time of one forward and backward pass of fn on x (its own leaf copy)."""
    x = x.detach().requires_grad_()
    t0 = time.thread_time()
    fn(x).square().mean().backward()
    return time.thread_time() - t0


def side_by_side(new, old, x: torch.Tensor, rounds: int) -> tuple[float, float, float]:
    """Median ms of fwd_bwd(new), of fwd_bwd(old) and median of their ratio within a round."""
    fwd_bwd(new, x), fwd_bwd(old, x)
    a, b, r = [], [], []
    for i in range(rounds):
        if i % 2:
            o, n = fwd_bwd(old, x), fwd_bwd(new, x)
        else:
            n, o = fwd_bwd(new, x), fwd_bwd(old, x)
        a.append(n)
        b.append(o)
        r.append(o / n)
    return 1e3 * statistics.median(a), 1e3 * statistics.median(b), statistics.median(r)


def parts(delta: GatedDeltaNet, T: int, rounds: int) -> None:
    """The conv and the rule's zero-state skip, each against the form it replaced."""
    B = max(1, TOKENS // T)
    width = sum(delta.widths)
    h = torch.randn(B, T, width)
    K = delta.kernel

    def conv1d(x: torch.Tensor) -> torch.Tensor:  # the replaced form: [B, C, T] and back
        full = F.pad(x.transpose(1, 2), (K - 1, 0))
        return F.silu(F.conv1d(full, delta.conv1d.weight, groups=width)).transpose(1, 2)

    new, old, ratio = side_by_side(lambda x: delta.convolve(x, None), conv1d, h, rounds)
    print(f"context {T}, depthwise conv on [{B}, {T}, {width}]: K shifted multiply-adds "
          f"{new:.1f} ms, F.conv1d {old:.1f} ms: {ratio:.2f}x")
    H, D = delta.n_v, delta.d_k
    g = -torch.rand(B, H, T) * 2
    beta = torch.rand(B, H, T)

    def rule(state: bool):
        def run(x: torch.Tensor) -> torch.Tensor:
            q, k, v = (l2_normalize(t) for t in x.unbind(0))
            S0 = torch.zeros(B, H, D, D) if state else None
            return chunked_gated_delta_rule(q, k, v, g, beta, S0)[0]
        return run

    qkv = torch.randn(3, B, H, T, D)
    new, old, ratio = side_by_side(rule(False), rule(True), qkv, rounds)
    print(f"context {T}, chunked rule: from no state {new:.1f} ms, from a zero state "
          f"{old:.1f} ms: {ratio:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--contexts", default="64,256,1024")
    args = ap.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    if args.rounds < 1 or args.threads < 1 or min(contexts) < 1:
        ap.error("--rounds, --threads and every context must be at least 1")
    torch.set_num_threads(args.threads)
    m = get_preset("qwen3_5").model
    m = replace(m, context_len=max(contexts))
    torch.manual_seed(0)
    model = Transformer(m)  # its layer 3 is attention, its layers 0-2 DeltaNet
    attn = next(b.attn for b in model.blocks if isinstance(b.attn, Attention))
    delta = next(b.attn for b in model.blocks if isinstance(b.attn, GatedDeltaNet))
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{args.threads} thread(s), {args.rounds} rounds, {TOKENS} tokens a pass")
    print(f"{'context':>8} {'attention ms':>13} {'DeltaNet ms':>12} {'DeltaNet / attention':>21}")
    for T in contexts:
        B = max(1, TOKENS // T)
        x = torch.randn(B, T, m.d_model)
        rope = model.rope(T, x)
        run_attn = lambda h, rope=rope: attn(h, rope)[0]  # noqa: E731
        run_delta = delta.mix
        fwd_bwd(run_attn, x), fwd_bwd(run_delta, x)  # warm up
        ratios, ta, td = [], [], []
        for r in range(args.rounds):
            if r % 2:
                d, a = fwd_bwd(run_delta, x), fwd_bwd(run_attn, x)
            else:
                a, d = fwd_bwd(run_attn, x), fwd_bwd(run_delta, x)
            ratios.append(d / a)
            ta.append(a)
            td.append(d)
        print(f"{T:>8} {1e3 * statistics.median(ta):>13.1f} {1e3 * statistics.median(td):>12.1f} "
              f"{statistics.median(ratios):>20.2f}x")
    parts(delta, min(contexts), args.rounds)
    T = max(contexts)
    x = torch.randn(max(1, TOKENS // T), T, m.d_model)

    def recurrent(h: torch.Tensor) -> torch.Tensor:
        delta.recurrent = True
        try:
            return delta.mix(h)
        finally:
            delta.recurrent = False

    fwd_bwd(delta.mix, x)
    rounds = max(1, args.rounds // 2)  # the token loop takes seconds a pass
    speedups = []
    for r in range(rounds):
        if r % 2:
            rec, chunk = fwd_bwd(recurrent, x), fwd_bwd(delta.mix, x)
        else:
            chunk, rec = fwd_bwd(delta.mix, x), fwd_bwd(recurrent, x)
        speedups.append(rec / chunk)
    print(f"context {T}: chunked form {statistics.median(speedups):.1f}x faster than the "
          f"recurrent one (median of {rounds} rounds, forward + backward)")


if __name__ == "__main__":
    main()
