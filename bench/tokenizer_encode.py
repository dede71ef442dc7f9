"""Encoding a corpus with depthlab's BPE against tiktoken, on the same vocabulary.

Run: python bench/tokenizer_encode.py [--rounds 3]. Trains a byte-level BPE of GPT-2's
size (50,257 ids, <|endoftext|> among them) on Shakespeare and Hong Lou Meng, gives
tiktoken the same merges (its mergeable ranks are our ids, its pattern GPT-2's), and
encodes the Shakespeare corpus (4.8 M characters) with: depthlab's corpus path
(`BPETokenizer.encode_corpus`, what the token cache runs), one `tokenizers` call on the
whole text (`encode`), tiktoken's `encode_ordinary`, and the cache's path before
(`encode_batch` of the lines, timed only: its ids may differ). Everything runs on one
thread (RAYON_NUM_THREADS=1 unless set: `tokenizers` would otherwise spread a batch over
the cores, tiktoken's encode_ordinary never does), and the figure is CPU seconds, which a
busy machine inflates less than wall time. Rounds are interleaved, so a busy machine
slows all of them alike; the figure is each one's best round. The ids of the three exact
ways must be identical. tiktoken is a dev extra (`pip install tiktoken`), never
needed at run time; without it the bench says so in one line and times depthlab alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before `tokenizers` starts its pool
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from depthlab.corpus import load_corpus  # noqa: E402
from depthlab.tokenizer import BPETokenizer  # noqa: E402

VOCAB = 50257  # GPT-2's
EOT = "<|endoftext|>"
# GPT-2's split, as tiktoken writes it (tiktoken_ext/openai_public.py) and `tokenizers`'
# ByteLevel pre-tokenizer runs it.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def byte_of_char() -> dict[str, int]:
    """GPT-2's byte-to-character table, inverted: byte-level BPE spells byte b as one
    printable character (the printable Latin-1 bytes as themselves, the rest shifted
    past 255)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in kept}
    for n, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + n)
    return {c: b for b, c in chars.items()}


def tiktoken_encoding(tok: BPETokenizer):
    """A tiktoken Encoding with our vocabulary: rank = our id, so its ids are ours."""
    import tiktoken

    table = byte_of_char()
    specials = set(tok.special_tokens)
    ranks = {bytes(table[c] for c in token): i
             for token, i in tok.hf.get_vocab().items() if token not in specials}
    return tiktoken.Encoding("depthlab-bench", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={t: tok.hf.token_to_id(t) for t in specials})


def best_s(fn, rounds: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(rounds):
        start = time.process_time()
        out = fn()
        times.append(time.process_time() - start)
    return min(times), out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each (default 3)")
    args = parser.parse_args(argv)
    text = load_corpus("shakespeare").text
    start = time.perf_counter()
    tok = BPETokenizer.train(text + load_corpus("hongloumeng").text, VOCAB, [EOT])
    print(f"trained {tok.vocab_size:,} ids in {time.perf_counter() - start:.1f} s; encoding "
          f"{len(text):,} characters on one thread (RAYON_NUM_THREADS="
          f"{os.environ['RAYON_NUM_THREADS']}), CPU seconds; CPUs {os.cpu_count()}, load "
          f"average {os.getloadavg()[0]:.2f}")
    try:
        enc = tiktoken_encoding(tok)
    except ImportError:
        enc = None
        print("tiktoken is not installed (pip install tiktoken): timing depthlab alone")
    ways = {"depthlab encode_corpus": lambda: tok.encode_corpus(text).tolist(),
            "tokenizers encode (whole text)": lambda: tok.encode(text),
            # the cache's path before: line by line, which splits a whitespace run at a
            # line end, so its ids may differ from encode's (timed, not compared)
            "encode_batch of lines (before)": lambda: [
                i for ids in tok.encode_batch(text.splitlines(keepends=True)) for i in ids]}
    if enc is not None:
        ways["tiktoken encode_ordinary"] = lambda: enc.encode_ordinary(text)
    times = {name: float("inf") for name in ways}
    ids = {}
    for _ in range(args.rounds):  # interleaved
        for name, fn in ways.items():
            t, ids[name] = best_s(fn, 1)
            times[name] = min(times[name], t)
    reference = ids["tokenizers encode (whole text)"]
    exact = [name for name in ids if "(before)" not in name]
    for name in exact:
        assert ids[name] == reference, f"{name}: ids differ from tokenizers' encode"
    print(f"{len(reference):,} ids, identical in all {len(exact)} exact ways")
    ours = times["depthlab encode_corpus"]
    for name, t in times.items():
        print(f"  {name:<32} {t:6.2f} s CPU  {len(reference) / t / 1e6:5.2f} M tokens/s  "
              f"{t / ours:5.2f}x depthlab")
    if enc is not None:
        print(f"depthlab / tiktoken: {ours / times['tiktoken encode_ordinary']:.2f}x")


if __name__ == "__main__":
    main()
