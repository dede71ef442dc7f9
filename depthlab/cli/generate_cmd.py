"""`depthlab generate` and `depthlab next-token`: ask a trained run for text, or for
the probabilities of the very next token and the shapes on the way there."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from depthlab.cli.common import parse_ids, print_json
from depthlab.errors import UserError
from depthlab.finite import check_finite_weights
from depthlab.memory import check_fits
from depthlab.probes.token_text import position_labels, token_text
from depthlab.rundir import load_model, load_tokenizer
from depthlab.threads import add_threads_arg, check_threads, use_threads


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, metavar="RUN_DIR", help="a run directory")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text (needs the run's tokenizer.json)")
    src.add_argument("--prompt-ids", metavar="1,2,3",
                     help="prompt as token ids, for runs without a tokenizer")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda", "mps"),
                   help="cpu (default), cuda or mps")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_threads_arg(p)


def register(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser(
        "generate", help="continue a prompt with a trained run",
        description="Continue a prompt. Example: depthlab generate --run runs/RUN "
        "--prompt 'ROMEO:' --tokens 200 --temperature 0.8 --top-k 40 --seed 1")
    _common(g)
    g.add_argument("--tokens", type=int, default=200, help="new tokens (default 200)")
    g.add_argument("--temperature", type=float, default=1.0, help="softmax temperature")
    g.add_argument("--top-k", type=int, default=None, help="sample among the k most likely")
    g.add_argument("--greedy", action="store_true", help="always take the most likely token")
    g.add_argument("--seed", type=int, default=None, help="seed for repeatable sampling")
    g.add_argument("--no-cache", action="store_true",
                   help="recompute the whole context for every new token instead of keeping keys, "
                   "values and recurrent states: the same tokens, slower; shows what the cache saves")
    g.set_defaults(handler=run_generate)

    n = sub.add_parser(
        "next-token", help="the prompt's tokens, the shape after each stage, the top next tokens",
        description="Show the prompt's tokens, the tensor shape after the embedding, each "
        "block, the final norm and the LM head, and the most likely next tokens. Example: "
        "depthlab next-token --run runs/RUN --prompt 今天天气真 --show 10")
    _common(n)
    n.add_argument("--show", type=int, default=10, help="how many next tokens (default 10)")
    n.set_defaults(handler=run_next_token)


def _load(args: argparse.Namespace):
    from depthlab.train.runtime import pick_device  # torch: only when the command runs

    check_threads(args.threads)
    ids = parse_ids(args.prompt_ids, "--prompt-ids") if args.prompt_ids is not None else None
    model, cfg = load_model(Path(args.run), device=str(pick_device(args.device, field="--device")))
    check_finite_weights(model, args.run)
    use_threads(args.threads, cfg.model.d_model)
    tok = load_tokenizer(Path(args.run))
    if ids is None:
        if tok is None:
            raise UserError(f"{args.run}: no tokenizer.json; give the prompt as --prompt-ids")
        ids = tok.encode(args.prompt)
    if not ids:
        raise UserError("the prompt has no tokens")
    # the longest forward this command runs: the prompt and what generate adds, up to the
    # context it slides within
    longest = min(len(ids) + getattr(args, "tokens", 0), max(len(ids), cfg.model.context_len))
    check_fits(cfg, str(next(model.parameters()).device), training=False, seq=longest,
               what=f"{args.run}/config.json")
    return model, tok, ids


def _piece(tok, i: int) -> str | None:
    """One token as text; a byte that is no whole character as <0xHH>, not '�'."""
    return token_text(tok, i) if tok is not None else None


def _prompt_pieces(tok, ids: list[int]) -> list[str | None]:
    """Each prompt token as text, a character split over byte tokens named on each of them."""
    return position_labels(tok, ids) if tok is not None else [None] * len(ids)


def run_generate(args: argparse.Namespace) -> int:
    from depthlab.generate import MAX_NEW_TOKENS, generate  # torch

    if not 0 <= args.tokens <= MAX_NEW_TOKENS:
        raise UserError(f"--tokens must be between 0 and {MAX_NEW_TOKENS:,}, got {args.tokens}")
    if not (math.isfinite(args.temperature) and args.temperature > 0) and not args.greedy:
        raise UserError(f"--temperature must be a finite number > 0, got {args.temperature} "
                        "(use --greedy for the most likely token)")
    if args.top_k is not None and args.top_k <= 0:
        raise UserError(f"--top-k must be > 0, got {args.top_k}")
    model, tok, ids = _load(args)
    new = generate(model, ids, args.tokens, temperature=args.temperature, top_k=args.top_k,
                   greedy=args.greedy, seed=args.seed, use_cache=not args.no_cache, run=args.run)
    text = tok.decode(new) if tok is not None else None
    if args.json:
        print_json({"prompt_ids": ids, "ids": new, "text": text,
                    "prompt": tok.decode(ids) if tok is not None else None})
    elif text is not None:
        print(tok.decode(ids) + text)
    else:
        print(",".join(map(str, ids + new)))
    return 0


def run_next_token(args: argparse.Namespace) -> int:
    from depthlab.generate import next_token  # torch

    if args.show <= 0:
        raise UserError(f"--show must be > 0, got {args.show}")
    model, tok, ids = _load(args)
    shapes, top = next_token(model, ids, args.show, run=args.run)
    if args.json:
        print_json({
            "tokens": [{"id": i, "text": t} for i, t in zip(ids, _prompt_pieces(tok, ids), strict=True)],
            "shapes": [{"stage": s, "shape": list(sh)} for s, sh in shapes],
            "top": [{"id": i, "text": _piece(tok, i), "prob": p} for i, p in top],
        })
        return 0
    print(f"Prompt: {len(ids)} tokens")
    for i, t in zip(ids, _prompt_pieces(tok, ids), strict=True):
        print(f"  {i:>6}  {t!r}" if tok is not None else f"  {i:>6}")
    print("\nShape after each stage (batch dimension omitted):")
    for stage, shape in shapes:
        print(f"  {stage:<28} [{' x '.join(map(str, shape))}]")
    print(f"\nTop {len(top)} next tokens:")
    for i, p in top:
        label = repr(_piece(tok, i)) if tok is not None else ""
        print(f"  {p:8.2%}  {i:>6}  {label}")
    return 0
