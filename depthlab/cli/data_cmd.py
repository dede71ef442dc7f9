"""`depthlab data prepare`: a corpus encoded once into token shards that training streams."""

from __future__ import annotations

import argparse

from depthlab.outdir import check_location


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "data", help="encode a corpus once into token shards that training reads by offset",
        description="Token data for runs bigger than memory.")
    dsub = p.add_subparsers(title="actions", metavar="ACTION", parser_class=type(p))
    q = dsub.add_parser(
        "prepare", help="stream a corpus through a tokenizer into token shards",
        description="Read a corpus a megabyte at a time, encode it with a tokenizer and "
        "write the ids as uint16 (vocabularies up to 65,536) or uint32 shards "
        "NAME_00000.bin, ... (each with a header naming its tokenizer, dtype and token "
        "count), the tokenizer.json and a manifest.json that states the validation part "
        "(the last --val-fraction of the tokens). Memory stays flat whatever the corpus's "
        "size. The ids equal those `depthlab train` makes from the same corpus and "
        "tokenizer. Train on the folder with `depthlab train --shards DIR` "
        "(data.shards=DIR). Example: depthlab data prepare --corpus books/ "
        "--tokenizer runs/my-bpe-run --out data/books-shards")
    q.add_argument("--corpus", required=True, metavar="PATH",
                   help="a .txt file, a folder of them (joined in sorted order with a "
                   "newline, as training joins them), or shakespeare | hongloumeng")
    q.add_argument("--tokenizer", required=True, metavar="TOKENIZER",
                   help="a tokenizer.json, a run directory holding one (e.g. a run trained "
                   "with --tokenizer bpe), or char (one id per character of the corpus, "
                   "found in a first pass over it)")
    q.add_argument("--out", required=True, metavar="DIR",
                   help="the shard folder to write; refused when it holds anything unless "
                   "--overwrite and it is a shard folder depthlab wrote")
    q.add_argument("--shard-tokens", type=int, default=None, metavar="N",
                   help="tokens per shard (default 100,000,000: 200 MB of uint16)")
    q.add_argument("--val-fraction", type=float, default=0.1, metavar="F",
                   help="the last F of the tokens are the validation part (default 0.1, "
                   "as data.val_fraction)")
    q.add_argument("--separate-documents", action="store_true",
                   help="join the files with <|endoftext|> instead of a newline "
                   "(data.separate_documents; the tokenizer must know that token)")
    q.add_argument("--overwrite", action="store_true",
                   help="replace a shard folder depthlab wrote at --out (nothing else)")
    q.add_argument("--no-progress", action="store_true", help="no progress bar or lines")
    q.set_defaults(handler=prepare_cmd)


def prepare_cmd(args: argparse.Namespace) -> int:
    from depthlab.shard_prepare import SHARD_TOKENS, prepare, summary_line  # numpy: on use

    out = check_location(args.out)
    done = prepare(args.corpus, args.tokenizer, out,
                   shard_tokens=SHARD_TOKENS if args.shard_tokens is None else args.shard_tokens,
                   val_fraction=args.val_fraction, separate_documents=args.separate_documents,
                   overwrite=args.overwrite, progress=not args.no_progress)
    print(summary_line(done))
    return 0
