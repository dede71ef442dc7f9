"""The lesson's figures beside ours, for docs/probes.md: numbers in the docs come from code.

Run: python scripts/probes_report.py > docs/probes_table.md (or --write docs/probes.md
to refresh the table between the markers in that file).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
from pathlib import Path

from depthlab.probes import (
    GrowthRequest,
    StackRequest,
    anatomy_of,
    anatomy_of_preset,
    compare_norms,
    gradient_reach,
    residual_paths,
    stream_growth,
    token_collapse,
    use_single_thread,
)

SEEDS = range(10)
IMPROVED = dict(residual="scaled", norm="rmsnorm")  # x + F(RMSNorm(x)) / sqrt(N)
BEGIN, END = "<!-- probe-table:begin -->", "<!-- probe-table:end -->"
# the orders of magnitude a sentence of docs/probes.md quotes: the tested seeds
ORDERS_BEGIN, ORDERS_END = "<!-- probe-orders:begin -->", "<!-- probe-orders:end -->"
ORDERS_SEEDS = (range(10), range(1000, 1010))  # tests/test_probes.py runs on both


def _fmt(v: float) -> str:
    if v == 0 or 1e-3 <= abs(v) < 1e4:
        return f"{v:.3g}"
    return f"{v:.1e}"


def _seeds(fn) -> str:
    values = [fn(s) for s in SEEDS]
    return f"{_fmt(fn(0))} (seeds 0-9: {_fmt(min(values))} .. {_fmt(max(values))})"


def rows() -> list[tuple[str, str, str, str]]:
    """(what, setting, lesson, ours)."""
    grad = lambda s, g=1.0, **kw: gradient_reach(StackRequest(seed=s, gain=g, **kw))
    coll = lambda s, n=32, **kw: token_collapse(StackRequest(depth=n, seed=s, **kw))
    out = [
        ("gradient bottom/top, plain", "N 32, g 0.5", "1.4e-20",
         _seeds(lambda s: grad(s, 0.5).ratio)),
        ("gradient bottom/top, plain", "N 32, g 2.0", "2.9e3",
         _seeds(lambda s: grad(s, 2.0).ratio)),
        ("orders of magnitude between them", "N 32", "23",
         _seeds(lambda s: math.log10(grad(s, 2.0).ratio / grad(s, 0.5).ratio))),
        ("gradient bottom/top, residual only", "N 32, g 1", "about 20",
         _seeds(lambda s: grad(s, residual="plain").ratio)),
        ("stream RMS after 32 writes, residual only", "N 32, g 1", "6.3",
         _seeds(lambda s: grad(s, residual="plain").stream_rms[-1])),
        ("gradient bottom/top, all three toggles", "N 32, g 1", "(near 1)",
         _seeds(lambda s: grad(s, **IMPROVED).ratio)),
        ("stream RMS after 32 writes, all three toggles", "N 32, g 1", "(near 1)",
         _seeds(lambda s: grad(s, **IMPROVED).stream_rms[-1])),
        ("collapse r, input", "6 tokens", "0.924", _seeds(lambda s: coll(s).rel_distance[0])),
        ("collapse r, plain", "8 layers, g 1", "5.8e-3",
         _seeds(lambda s: coll(s, 8).rel_distance[-1])),
        ("collapse r, plain", "32 layers, g 1", "3.2e-10",
         _seeds(lambda s: coll(s).rel_distance[-1])),
        ("collapse r, residual only", "32 layers, g 1", "0.026",
         _seeds(lambda s: coll(s, residual="plain").rel_distance[-1])),
        ("mean cosine, residual only", "32 layers, g 1", "0.999",
         _seeds(lambda s: coll(s, residual="plain").mean_cosine[-1])),
        ("collapse r, all three toggles", "32 layers, g 1", "0.828",
         _seeds(lambda s: coll(s, **IMPROVED).rel_distance[-1])),
        ("mean cosine, all three toggles", "32 layers, g 1", "0.162",
         _seeds(lambda s: coll(s, **IMPROVED).mean_cosine[-1])),
    ]
    growth = statistics.mean(stream_growth(GrowthRequest(128, seed=s)).measured_rms[-1]
                             for s in SEEDS)
    n = compare_norms([3, 4])
    p = residual_paths(2, "0.5").to_json()  # exact: each value as its text
    anchor, q14 = anatomy_of("lesson-anchor"), anatomy_of("qwen3-14b")
    out += [
        ("stream RMS after 128 unit writes", "256 x 64 samples, mean of 10 seeds",
         "sqrt(129) = 11.36", f"{growth:.3f}"),
        ("two-layer path expansion", "F(x) = 0.5 x, x0 = 1", "1 + 0.5 + 0.5 + 0.25 = 2.25",
         " + ".join(q["value_text"] for q in p["paths"]) + f" = {p['residual_output_text']}"),
        ("RMSNorm([3, 4])", "eps 1e-5", "RMS 3.536 -> [0.849, 1.131]",
         f"RMS {n.rms:.3f} -> [{n.rmsnorm[0]:.3f}, {n.rmsnorm[1]:.3f}]"),
        ("LayerNorm([3, 4])", "eps 1e-5", "about [-1, 1]",
         f"[{n.layernorm[0]:.5f}, {n.layernorm[1]:.5f}]"),
        ("residual init std", "course model, 4 layers", "0.02 / sqrt(8) = 0.00707",
         f"{anatomy_of_preset('course').residual_init_std:.5f}"),
        ("GPT-2 small parameters", "gpt2 config", "124M (tied head)",
         f"{anatomy_of('gpt2').total_params:,}"),
        ("DeepSeek-LLM-67B FFN", "config", "8192 -> 22016",
         f"{anatomy_of('deepseek-llm-67b').model.d_model} -> "
         f"{anatomy_of('deepseek-llm-67b').model.ffn_hidden}"),
        ("anchor FFN width", "lesson-anchor / qwen3-14b", "5120 -> 17408 (3.4d)",
         f"{anchor.model.d_model} -> {anchor.model.ffn_hidden} ({anchor.ffn_multiple:.2f}d)"),
        ("anchor FFN share", "lesson-anchor: trunk FFN / all checkpoint weights", "61.6%",
         f"{100 * anchor.ffn_share:.1f}% (qwen3-14b: {100 * q14.ffn_share:.1f}%)"),
        ("anchor q_proj with output gate", "lesson-anchor", "5120 -> 12288 = 2 x 6144",
         f"{anchor.model.d_model} -> {anchor.q_proj_width}"),
        ("anchor residual writes", "64 layers", "128", f"{anchor.n_writes}"),
    ]
    return out


def orders(seed: int) -> float:
    """Orders of magnitude between the plain stack's bottom/top gradient ratio at g = 2
    and at g = 0.5 (N 32)."""
    ratio = lambda g: gradient_reach(StackRequest(seed=seed, gain=g)).ratio
    return math.log10(ratio(2.0) / ratio(0.5))


def orders_text() -> str:
    """The range of `orders` over each group of tested seeds, as docs/probes.md says it."""
    parts = []
    for seeds in ORDERS_SEEDS:
        values = [orders(s) for s in seeds]
        parts.append(f"{min(values):.1f}-{max(values):.1f}" + (
            " orders of magnitude" if not parts else "") + f" over seeds {seeds[0]}-{seeds[-1]}")
    return ", ".join(parts)


def markdown() -> str:
    lines = ["| quantity | setting | lesson | ours (seed 0; range over seeds 0-9) |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", metavar="FILE.md",
                        help=f"replace the text between {BEGIN} and {END} in FILE.md")
    args = parser.parse_args(argv)
    use_single_thread()
    table = markdown()
    if not args.write:
        print(table, end="")
        return
    path = Path(args.write)
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path}: no {BEGIN} ... {END} markers")
    text = pattern.sub(lambda _: f"{BEGIN}\n{table}{END}", text)
    orders_at = re.compile(re.escape(ORDERS_BEGIN) + ".*?" + re.escape(ORDERS_END), re.S)
    text = orders_at.sub(lambda _: f"{ORDERS_BEGIN}{orders_text()}{ORDERS_END}", text)
    path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
