"""`depthlab data prepare`: a corpus streamed through a tokenizer into token shards.

The corpus is read a megabyte at a time (depthlab.corpus.stream_corpus), cut where
encoding splits anyway and encoded a chunk at a time (Tokenizer.encode_arrays), and
the ids go straight to the shard being written (depthlab.shards.ShardWriter): memory
stays that of a chunk and the encoder's table, whatever the corpus's size
(bench/shard_prepare.py measures it). The ids are those of the token cache a run on
the same corpus and tokenizer makes, so both train on the same windows.

The folder is written whole or not at all (depthlab.outdir.write_whole: a hidden stage
beside --out, put in place when the manifest is written): a refusal, a failure or
Ctrl-C leaves --out as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from depthlab import outdir
from depthlab.atomic import atomic_write_text
from depthlab.corpus import CORPORA, DOC_SEPARATOR, CorpusStream, corpus_label, stream_corpus
from depthlab.errors import UserError
from depthlab.memory import human
from depthlab.progress import Progress
from depthlab.shards import MANIFEST_FILE, Manifest, ShardWriter
from depthlab.tokenizer import (
    TOKENIZER_FILE,
    CharTokenizer,
    Tokenizer,
    load_tokenizer,
    token_dtype,
    tokenizer_fingerprint,
)
from depthlab.tokstream import chunks, special_pattern, split_specials

SHARD_TOKENS = 100_000_000  # tokens per shard: 200 MB of uint16, as nanochat's shards
TOKENIZER_NAMES = ("char",)


@dataclass(frozen=True)
class Prepared:
    out: Path
    shards: int
    tokens: int
    val_tokens: int
    dtype: str
    corpus_bytes: int


def resolve_tokenizer(value: str, corpus: str, separate_documents: bool) -> Tokenizer:
    """--tokenizer: a tokenizer.json, a run directory holding one, or `char` (one id per
    character of the corpus, found in a first pass over it, as `depthlab train
    --tokenizer char` makes it)."""
    if value == "char":
        specials = [DOC_SEPARATOR] if separate_documents else []
        return _char_tokenizer(stream_corpus(corpus, separate_documents), specials)
    if value == "bpe":
        raise UserError("--tokenizer bpe: a byte-level BPE is trained on the whole corpus in "
                        "memory; give its tokenizer.json instead (a run's RUN/tokenizer.json, "
                        "from `depthlab train --tokenizer bpe` on a sample of the text)")
    path = Path(value).expanduser()
    if path.is_dir():
        path = path / TOKENIZER_FILE
    if not path.exists():
        raise UserError(f"--tokenizer {value!r}: no such file; give a tokenizer.json, a run "
                        f"directory holding one, or {' or '.join(TOKENIZER_NAMES)}")
    return load_tokenizer(path)


def _char_tokenizer(stream: CorpusStream, specials: list[str]) -> CharTokenizer:
    """CharTokenizer.train over a stream: the characters outside the special tokens."""
    pattern, seen = special_pattern(specials), set()
    for chunk in chunks(stream.pieces(), specials, False):
        for piece, special in split_specials(chunk, pattern):
            if not special:
                seen.update(piece)
    return CharTokenizer(sorted(seen), specials)


def prepare(corpus: str, tokenizer: str, out: Path, *, shard_tokens: int = SHARD_TOKENS,
            val_fraction: float = 0.1, separate_documents: bool = False,
            overwrite: bool = False, progress: bool = True) -> Prepared:
    """Encode `corpus` with `tokenizer` into a shard folder at `out` (see the module)."""
    if shard_tokens <= 0:
        raise UserError(f"--shard-tokens must be > 0, got {shard_tokens}")
    if not 0.0 < val_fraction < 0.5:
        raise UserError(f"--val-fraction must be in (0, 0.5) (data.val_fraction's range), "
                        f"got {val_fraction:g}")
    stream = stream_corpus(corpus, separate_documents)  # files checked before any write
    sources = () if corpus in CORPORA else (Path(corpus).expanduser(),)
    outdir.check_target(out, outdir.TOKEN_SHARDS, replace=overwrite, replace_flag="--overwrite",
                        sources=sources)
    tok = resolve_tokenizer(tokenizer, corpus, separate_documents)
    dtype = token_dtype(tok.vocab_size)
    sha = tokenizer_fingerprint(tok)
    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", corpus_label(corpus))[:60] or "tokens"
    result: dict[str, int] = {}

    def write(stage: Path) -> None:
        tok.save(stage / TOKENIZER_FILE)
        writer = ShardWriter(stage, name, dtype, sha, shard_tokens)
        mib = max(1, -(-stream.total_bytes // (1 << 20)))
        bar = Progress(mib, desc=f"prepare {out.name}", unit="MiB", enabled=progress)
        try:
            for ids in tok.encode_arrays(stream.pieces(), dtype):
                writer.add(ids)
                bar.report(min(stream.bytes_read >> 20, mib), tokens=f"{writer.tokens:,} tokens")
            shards = writer.close()
        finally:
            writer.abort()
            bar.close()
        if writer.tokens == 0:
            raise UserError(f"corpus {corpus!r}: encodes to no tokens; nothing was written")
        manifest = Manifest(sha, tok.vocab_size, dtype.name,
                            {"spec": corpus, "sha256": stream.sha256,
                             "files": max(len(stream.files), 1), "bytes": stream.total_bytes,
                             "separate_documents": separate_documents},
                            shards, val_fraction)
        atomic_write_text(stage / MANIFEST_FILE, manifest.to_json())
        total = writer.tokens
        result.update(shards=len(shards), tokens=total,
                      val_tokens=min(max(1, int(total * val_fraction)), total))

    with outdir.claim_target(out, outdir.TOKEN_SHARDS, replace=overwrite,
                             replace_flag="--overwrite", sources=sources):
        outdir.write_whole(out, outdir.TOKEN_SHARDS, write)
    return Prepared(out, result["shards"], result["tokens"], result["val_tokens"], dtype.name,
                    stream.total_bytes)


def summary_line(p: Prepared) -> str:
    return (f"{p.tokens:,} {p.dtype} tokens ({p.val_tokens:,} for validation) from "
            f"{human(p.corpus_bytes)} of text in {p.shards} shard(s) -> {p.out}")
