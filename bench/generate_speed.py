"""Generation speed with and without the KV cache, side by side in one process.

For each model, 200 greedy tokens after a 16-token prompt, alternating cached and
uncached runs (so machine load hits both alike), each timed with time.thread_time.
Also checks that both produced the same tokens. Target: cached >= 5x at 200 tokens,
on every row and every pair of runs: the speed-up column is the median of the pairs'
ratios, min and max show their spread.

A cached one-token step goes through depthlab.model.decode: about 36 PyTorch calls per
layer, none of them an nn.Module call, and one read of every weight, stored the way
MKL's single-row matmul streams fastest. So at d 128 the step is bound by its calls,
from d 256 on by reading the weights from memory; the uncached step is a forward pass
over the whole window, bound by its FLOPs. The table goes from the course model to a
25M-parameter Llama-shaped one.

    python bench/generate_speed.py [--tokens 200] [--repeats 5] [--threads 1] [--models course,gpt2]

The Llama-shaped row alone takes minutes on a loaded 2-core machine; --models picks rows
by the first word of their label.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace

import torch

from depthlab.generate import generate
from depthlab.model import Transformer
from depthlab.presets import get_preset

MODELS = {  # label -> (preset, changes to its model config)
    "course (d 128, 4 layers)": ("course", {}),
    "gpt2 preset (learned positions)": ("gpt2", {}),
    "qwen3 preset, d 256, 8 layers (GQA, QK-norm)": ("qwen3", {"d_model": 256, "n_layers": 8}),
    "llama preset, d 512, 8 layers, vocab 8192": ("llama", {"d_model": 512, "n_layers": 8,
                                                           "n_heads": 8, "vocab_size": 8192}),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default=",".join(label.split()[0] for label in MODELS),
                    help="rows to run, by the first word of their label (default: all)")
    args = ap.parse_args()
    chosen = args.models.split(",")
    unknown = set(chosen) - {label.split()[0] for label in MODELS}
    if unknown:
        ap.error(f"--models: unknown {', '.join(sorted(unknown))}; choose from "
                 f"{', '.join(label.split()[0] for label in MODELS)}")
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    print(f"{args.tokens} greedy tokens after a {args.prompt}-token prompt; torch "
          f"{torch.__version__}, {torch.get_num_threads()} thread(s); 1-min load average "
          f"{load:.2f} on {os.cpu_count()} CPUs; on-CPU time of this thread")
    print(f"{'model':<46} {'cached tok/s':>13} {'uncached tok/s':>15} {'speed-up':>9} "
          f"{'min':>6} {'max':>6} same")
    lowest = float("inf")
    for label, (preset, changes) in MODELS.items():
        if label.split()[0] not in chosen:
            continue
        cfg = replace(get_preset(preset).model, **changes)
        torch.manual_seed(0)
        model = Transformer(cfg).eval()
        prompt = torch.randint(0, cfg.vocab_size, (args.prompt,)).tolist()
        times: dict[bool, list[float]] = {True: [], False: []}
        outputs: dict[bool, list[int]] = {}
        for _ in range(args.repeats):
            for use_cache in (True, False):
                t0 = time.thread_time()
                outputs[use_cache] = generate(model, prompt, args.tokens, greedy=True,
                                              use_cache=use_cache)
                times[use_cache].append(time.thread_time() - t0)
        cached, uncached = (args.tokens / statistics.median(times[c]) for c in (True, False))
        ratios = [u / c for c, u in zip(times[True], times[False], strict=True)]
        lowest = min(lowest, *ratios)
        same = "yes" if outputs[True] == outputs[False] else "NO"
        print(f"{label:<46} {cached:>13,.0f} {uncached:>15,.0f} "
              f"{statistics.median(ratios):>8.1f}x {min(ratios):>5.1f}x {max(ratios):>5.1f}x {same}")
    verdict = "met" if lowest >= 5 else "NOT met"
    print(f"target >= 5x at {args.tokens} tokens: {verdict} (lowest pair {lowest:.1f}x; "
          f"1-min load average now {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
