"""`depthlab model describe`: the block structure, parameters and shapes of a config."""

from __future__ import annotations

import argparse
import math

from depthlab.cli.common import add_config_args, config_from_args, print_json
from depthlab.errors import UserError
from depthlab.memory import check_fits
from depthlab.variants import RESIDUAL_SPECS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", help="describe a model config: blocks, parameters, shapes")
    msub = p.add_subparsers(title="actions", metavar="ACTION", parser_class=type(p))
    d = msub.add_parser(
        "describe",
        help="print the block structure, parameter count by component and tensor shapes",
        description="Print the block structure, the parameter count by component and the "
        "tensor shape after each stage of one forward pass. Example: depthlab model describe "
        "--preset course --set model.n_layers=12 --set model.residual=none",
    )
    add_config_args(d)
    d.add_argument("--tokens", type=int, default=5, help="tokens in the traced forward pass")
    d.add_argument("--json", action="store_true", help="print JSON instead of text")
    d.add_argument("--check", action="store_true",
                   help="also run one real forward+backward pass on random tokens and report "
                   "the loss and gradient norm (needs the weights in memory)")
    d.set_defaults(handler=describe)
    p.set_defaults(handler=lambda a: _no_action(p))


def _no_action(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    raise UserError("name an action: depthlab model describe ...")


def describe(args: argparse.Namespace) -> int:
    from depthlab.model.summary import summarize

    if not 1 <= args.tokens <= 4096:
        raise UserError(f"--tokens must be between 1 and 4096, got {args.tokens}")
    cfg = config_from_args(args)
    m = cfg.model
    if m.position == "learned" and args.tokens > m.context_len:
        raise UserError(f"--tokens {args.tokens} is past model.context_len={m.context_len}: "
                        "learned positions exist for that many tokens only; give --tokens at "
                        f"most {m.context_len} or raise model.context_len")
    s = summarize(m, args.tokens)
    check = None
    if args.check:
        check_fits(cfg, batch=2, seq=args.tokens, what="model describe --check")
        check = _forward_backward(cfg, args.tokens)
    if args.json:
        print_json({"config": cfg.to_dict()["model"], "params": s.params_by_component,
                    "total_params": s.total_params, "params_per_block": s.params_per_block,
                    "shapes": [{"stage": n, "shape": list(sh)} for n, sh in s.shapes],
                    "check": check})
        return 0
    import torch

    from depthlab.model.transformer import Block

    print(f"{m.n_layers} blocks x 2 sublayers = {m.n_writes} writes into the residual stream")
    streams = f" streams={m.streams}" if RESIDUAL_SPECS[m.residual].widens_copies else ""
    print(f"norm={m.norm} placement={m.placement} residual={m.residual}{streams} ffn={m.ffn} "
          f"(hidden {m.ffn_hidden} = {m.ffn_hidden / m.d_model:.2f}d) position={m.position} "
          f"qk_norm={m.qk_norm} attn_gate={m.attn_gate} final_norm={m.final_norm} "
          f"norm_scale={m.norm_scale} value_residual={m.value_residual}")
    if "gated_deltanet" in m.layer_kinds:
        print(mixer_line(m))
    from depthlab.model.shortcuts import describe as describe_shortcuts

    if describe_shortcuts(m):
        print(f"stream shortcuts: {describe_shortcuts(m)}")
    shown = min(m.n_layers, 2) - 1  # block 1 stands for 1..L-1 (block 0 has no value mix)
    print(f"\nOne block (block {shown}):")
    with torch.device("meta"):  # built alone from the whole config: constants that
        block = Block(m, shown)  # depend on L (scaled, deepnorm) are those of the run
    block_lines = str(block).splitlines()
    print("\n".join("  " + line for line in block_lines if "HookPoint()" not in line))
    print("\nParameters:")
    for comp, n in s.params_by_component.items():
        print(f"  {comp:<18} {n:>14,}  {100 * n / s.total_params:5.1f}%")
    print(f"  {'total':<18} {s.total_params:>14,}   (per block {s.params_per_block:,})")
    print(f"\nShapes for {args.tokens} tokens (batch dimension omitted):")
    for name, shape in s.shapes:
        if ".blocks." in f".{name}" and not name.startswith(("blocks.0.", f"blocks.{m.n_layers - 1}.")):
            continue  # middle blocks repeat the first one
        print(f"  {name:<32} [{' x '.join(map(str, shape))}]")
    if m.n_layers > 2:
        print(f"  (blocks 1..{m.n_layers - 2} have the same shapes)")
    if check:
        print(f"\nForward+backward on random tokens: loss {check['loss']:.4f} "
              f"(ln V = {check['log_vocab']:.4f}), gradient norm {check['grad_norm']:.4f}, "
              f"finite: {check['finite']}")
    return 0


def mixer_line(m) -> str:
    """`model describe`'s line on the token mixers: which layers are Gated DeltaNet, and
    their heads, head sizes and conv kernel."""
    kinds = m.layer_kinds
    n_linear = kinds.count("gated_deltanet")
    pattern = f" layer_pattern={m.layer_pattern}" if m.layer_pattern else ""
    return (f"mixer=gated_deltanet{pattern}: {n_linear} Gated DeltaNet and "
            f"{len(kinds) - n_linear} attention layers; DeltaNet {m.linear_k_heads} key / "
            f"{m.linear_v_heads} value heads of {m.linear_k_dim} / {m.linear_v_dim}, conv "
            f"kernel {m.linear_conv_kernel}, state {m.linear_k_dim} x {m.linear_v_dim} per "
            "value head")


def _forward_backward(cfg, n_tokens: int) -> dict:
    import torch
    import torch.nn.functional as F

    from depthlab.model import Transformer

    torch.manual_seed(cfg.train.seed)
    model = Transformer(cfg.model)
    idx = torch.randint(0, cfg.model.vocab_size, (2, n_tokens + 1))
    logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
    loss.backward()
    grad_norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in model.parameters()))
    return {"loss": loss.item(), "log_vocab": math.log(cfg.model.vocab_size),
            "grad_norm": grad_norm.item(),
            "finite": bool(torch.isfinite(loss) and torch.isfinite(grad_norm))}
