"""BPE training in a child process, so a signal stops it and a crash is one line.

The `tokenizers` trainer is Rust that runs for minutes on a large corpus without
returning to Python: Ctrl-C and SIGTERM waited until it finished (17 min on 200 MB of one
character), and an allocation it could not get aborted the whole process, leaving a run
directory holding only its lock. Here the parent streams the training texts through a
pipe to `python -m depthlab.bpe_train` and waits for the tokenizer's JSON; an interrupt
kills the child at once and goes on as KeyboardInterrupt (exit 130, the usual cleanup),
and a child that dies is a UserError naming how.

Before that, `check_fits` refuses a corpus whose training could not fit the free memory
(depthlab.memory.available_bytes, the figure every other estimate is held against). The
trainer keeps each distinct pre-token as a string and as 32-byte symbols, and a set of
word positions for every distinct pair of symbols in it, so its peak grows with the bytes
of distinct text. The estimate takes every byte as distinct, the worst case, so a refusal
is never wrong: measured peaks (the child's RSS) were 107 bytes a byte for 5 MB of random
letters and spaces (every word distinct), ~35 for one character repeated (200 MB peaked at
6.9 GB), 29 for 5 MB of Shakespeare, mostly the interpreter's own 60 MB.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from depthlab.errors import UserError
from depthlab.memory import available_bytes, human

BYTES_PER_BYTE = 112  # the trainer's peak per byte of text, at worst (module docstring)
BYTES_PER_ID = 2048  # vocabulary, merges and their maps per id of vocab_size
BASE_BYTES = 64 << 20  # the child's interpreter and `tokenizers`
_LENGTH = struct.Struct("<Q")


def untrained_bpe(vocab_size: int, specials: Sequence[str]) -> tuple[Any, Any]:
    """A byte-level BPE `tokenizers.Tokenizer` (GPT-2's split, no prefix space) and the
    trainer that fills it with `vocab_size` ids, the special tokens first."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers, trainers
    from tokenizers import Tokenizer as HFTokenizer  # only BPE runs load it

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in specials],
    )
    return tok, trainer


def estimate(text_bytes: int, vocab_size: int) -> int:
    """Bytes the trainer may hold at its peak for `text_bytes` of UTF-8 text."""
    return BASE_BYTES + BYTES_PER_BYTE * text_bytes + BYTES_PER_ID * vocab_size


def utf8_size(text: str, step: int = 1 << 20) -> int:
    """len(text.encode()) without holding a second copy of a large corpus."""
    if text.isascii():
        return len(text)
    return sum(len(text[i:i + step].encode("utf-8")) for i in range(0, len(text), step))


def check_fits(text: str, vocab_size: int, what: str) -> None:
    need, free = estimate(utf8_size(text), vocab_size), available_bytes()
    if need > free:
        raise UserError(
            f"{what}: BPE training at data.bpe_vocab={vocab_size} may need up to "
            f"{human(need)} ({human(utf8_size(text))} of text, ~{BYTES_PER_BYTE} bytes a "
            f"byte at worst) but {human(free)} is free; train on less text or on a "
            "machine with more memory")


def train_json(texts: Iterable[str], vocab_size: int, specials: list[str], what: str) -> str:
    """The trained tokenizer's JSON, from a child process fed `texts`."""
    with tempfile.TemporaryFile() as err:
        root = str(Path(__file__).resolve().parent.parent)  # this depthlab, wherever it is
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "depthlab.bpe_train", str(vocab_size), json.dumps(specials)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
            env=os.environ | {"PYTHONPATH": path})
        try:
            out = _exchange(proc, texts)
        finally:  # an interrupt (or any error here) must not leave it running
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if proc.returncode != 0 or out is None:
            err.seek(0)
            lines = err.read().decode("utf-8", "replace").strip().splitlines()
            raise UserError(f"{what}: BPE training at data.bpe_vocab={vocab_size} failed: "
                            f"{_death(proc.returncode)}"
                            + (f" ({lines[-1][:200]})" if lines else ""))
    return out


def _exchange(proc: subprocess.Popen, texts: Iterable[str]) -> str | None:
    """Send the texts, then read the JSON; None when the child went away first."""
    try:
        for text in texts:
            data = text.encode("utf-8")
            proc.stdin.write(_LENGTH.pack(len(data)) + data)
        proc.stdin.write(_LENGTH.pack(0))
        proc.stdin.close()
    except BrokenPipeError:
        return None
    return proc.stdout.read().decode("utf-8")


def _death(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        how = f"the trainer was killed by {name}"
        return how + (" (out of memory?)" if name in ("SIGKILL", "SIGABRT") else "")
    return f"the trainer exited with code {code}"


def _read_texts(stream) -> Iterator[str]:
    while True:
        (n,) = _LENGTH.unpack(stream.read(_LENGTH.size))
        if n == 0:
            return
        yield stream.read(n).decode("utf-8")


def _die_with_parent() -> None:
    """Ask Linux for SIGKILL when the parent dies (a parent killed with -9 cannot kill its
    child): the trainer must not run on for minutes for nobody. Elsewhere, nothing."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request
        os._exit(1)


def main(argv: list[str]) -> int:
    """The child: texts on stdin (length-prefixed), the tokenizer's JSON on stdout. Ctrl-C
    at a terminal reaches the whole process group; the parent decides, and kills."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    vocab_size, specials = int(argv[0]), json.loads(argv[1])
    tok, trainer = untrained_bpe(vocab_size, specials)
    tok.train_from_iterator(_read_texts(sys.stdin.buffer), trainer=trainer)
    sys.stdout.buffer.write(tok.to_str().encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
