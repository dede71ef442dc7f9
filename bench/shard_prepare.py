"""Peak memory of `depthlab data prepare` against the corpus's size: it should not grow.

Run: python bench/shard_prepare.py [--sizes 200,1000] [--work DIR]. For each size (MB)
it writes a folder of generated English-like text (files of 128 MB: lines of 4-14 words,
a blank line between paragraphs, words drawn Zipf-like from 20,000, one in twenty with
a random number glued on, so the distinct stretches keep growing as in real text and the
encoder's table of them fills and starts afresh, depthlab.bpe_corpus.MAX_TABLE), then
prepares it with a 2,048-id byte-level BPE trained on its first megabyte, in a fresh
process whose peak RSS /usr/bin/time reports (%M; its own fork, so the peak is not
inherited from this process, as ru_maxrss would be across exec). A process that only
imports what prepare imports and loads the tokenizer gives the floor. The sizes run in
one invocation, on one machine, side by side: the figure is the ratio of the peaks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
FILE_MB = 128
CHILD = """
import json, sys, time
from depthlab.shard_prepare import prepare
from depthlab.tokenizer import load_tokenizer
from pathlib import Path
t0 = time.perf_counter()
if sys.argv[1] != "-":
    done = prepare(sys.argv[1], sys.argv[2], Path(sys.argv[3]), progress=False)
    tokens = done.tokens
else:
    load_tokenizer(Path(sys.argv[2]))
    tokens = 0
print(json.dumps({"seconds": time.perf_counter() - t0, "tokens": tokens}))
"""
TIME = "/usr/bin/time"  # GNU time: -f %M is the child's peak RSS in KB


def vocabulary(rng: np.random.Generator, n: int = 20000) -> list[str]:
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    weights = np.linspace(2.0, 0.1, len(letters))
    weights /= weights.sum()
    lengths = rng.integers(2, 11, size=n)
    return ["".join(rng.choice(letters, size=k, p=weights)) for k in lengths]


def write_corpus(folder: Path, megabytes: int, seed: int = 0) -> int:
    """Generated text of about `megabytes` MB in files of FILE_MB; the bytes written."""
    rng = np.random.default_rng(seed)
    words = vocabulary(rng)
    zipf = 1.0 / np.arange(1, len(words) + 1)
    zipf /= zipf.sum()
    folder.mkdir(parents=True)
    total, index, target = 0, 0, megabytes << 20
    while total < target:
        path = folder / f"part_{index:04d}.txt"
        written = 0
        with open(path, "w", encoding="utf-8") as f:
            while written < min(FILE_MB << 20, target - total):
                picks = rng.choice(len(words), size=200_000, p=zipf)
                fresh = rng.random(200_000) < 0.05
                numbers = rng.integers(0, 1_000_000, size=200_000)
                toks = [f"{words[w]}{n}" if fr else words[w]
                        for w, fr, n in zip(picks, fresh, numbers, strict=True)]
                ends = np.cumsum(rng.integers(4, 15, size=len(toks) // 4))
                lines = [" ".join(toks[a:b]) for a, b in zip([0, *ends[:-1]], ends,
                                                            strict=True) if b <= len(toks)]
                text = "".join(line + (".\n\n" if i % 7 == 6 else ",\n")
                               for i, line in enumerate(lines))
                f.write(text)
                written += len(text)
        total += written
        index += 1
    return total


def child(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
           "RAYON_NUM_THREADS": "1"}
    done = subprocess.run([TIME, "-f", "peak_kb=%M", sys.executable, "-c", CHILD, *args],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise SystemExit(f"bench: prepare failed: {done.stderr.strip()[-400:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    peak = [ln for ln in done.stderr.splitlines() if ln.startswith("peak_kb=")][-1]
    return {**out, "peak_kb": int(peak.removeprefix("peak_kb="))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="200,1000", help="corpus sizes in MB, comma-separated")
    ap.add_argument("--work", default=None, help="folder for the text and shards (default: "
                    "a temporary one, removed at the end)")
    args = ap.parse_args()
    if not os.access(TIME, os.X_OK):
        raise SystemExit(f"bench: needs GNU time at {TIME} (apt-get install time)")
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(args.work or tempfile.mkdtemp(prefix="shard-bench-"))
    sys.path.insert(0, str(REPO))
    from depthlab.tokenizer import BPETokenizer

    try:
        rows = []
        for mb in sizes:
            corpus = work / f"text_{mb}mb"
            t0 = time.perf_counter()
            nbytes = write_corpus(corpus, mb)
            gen_s = time.perf_counter() - t0
            tok_path = work / "tokenizer.json"
            if not tok_path.exists():
                sample = (corpus / "part_0000.txt").read_text(encoding="utf-8")[:1 << 20]
                BPETokenizer.train(sample, 2048).save(tok_path)
            floor = child("-", str(tok_path))
            run = child(str(corpus), str(tok_path), str(work / f"shards_{mb}mb"))
            rows.append((mb, nbytes, run, floor))
            print(f"{nbytes / 1e6:8.0f} MB text (written in {gen_s:.0f} s): "
                  f"{run['tokens']:,} tokens in {run['seconds']:.0f} s "
                  f"({nbytes / 1e6 / run['seconds']:.1f} MB/s), peak RSS "
                  f"{run['peak_kb'] / 1024:.0f} MiB (imports alone {floor['peak_kb'] / 1024:.0f} MiB)",
                  flush=True)
            shutil.rmtree(corpus)
            shutil.rmtree(work / f"shards_{mb}mb")
        small, large = rows[0], rows[-1]
        print(f"largest / smallest corpus: {large[1] / small[1]:.1f}x the text, "
              f"{large[2]['peak_kb'] / small[2]['peak_kb']:.2f}x the peak RSS")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
