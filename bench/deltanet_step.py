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

    python bench/deltanet_step.py [--rounds 7] [--threads 1] [--contexts 64,256,1024]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from dataclasses import replace

import torch

from depthlab.model.attention import Attention
from depthlab.model.deltanet import GatedDeltaNet
from depthlab.model.transformer import Transformer
from depthlab.presets import get_preset

TOKENS = 4096


def fwd_bwd(fn, x: torch.Tensor) -> float:
    """thread_time of one forward and backward pass of fn on x (its own leaf copy)."""
    x = x.detach().requires_grad_()
    t0 = time.thread_time()
    fn(x).square().mean().backward()
    return time.thread_time() - t0


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
