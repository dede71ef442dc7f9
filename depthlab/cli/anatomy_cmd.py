"""`depthlab anatomy`: shapes and parameters of a preset, a shipped config or a config.json."""

from __future__ import annotations

import argparse
import textwrap

from depthlab.cli.common import print_json
from depthlab.cli.table import legend, print_lines, table
from depthlab.errors import UserError
from depthlab.hf.mapping import ANATOMY
from depthlab.hf.mapping_doc import help_text
from depthlab.probes import anatomy_of, anatomy_of_preset, evolution_table, shipped_configs
from depthlab.probes.exact import init_scale_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "anatomy", help="tensor shapes and parameter shares of a model config",
        description=textwrap.fill(
            "Tensor shape at every stage for T tokens, parameters per stage, component and "
            "per layer, FFN share and width, q_proj width, residual writes, init std. A "
            "config.json is read by the same table as `depthlab hf import` (below), which "
            "here also knows the families depthlab cannot run and skips the fields that "
            "change no parameter (RoPE scaling, sliding windows, the activation). "
            "Examples: depthlab anatomy gpt2 --tokens 5; depthlab anatomy --preset course; "
            "depthlab anatomy path/to/config.json; depthlab anatomy --evolution", 92),
        epilog=help_text(ANATOMY), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", metavar="CONFIG",
                   help="a shipped config name (see --list) or a Hugging Face config.json path")
    p.add_argument("--preset", help="a named preset instead of a config")
    p.add_argument("--tokens", type=int, default=5, help="tokens T for the shapes")
    p.add_argument("--list", action="store_true", help="list the shipped configs")
    p.add_argument("--evolution", action="store_true",
                   help="the lesson's evolution table, computed from presets and shipped configs")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        names = shipped_configs()
        print_json(names) if args.json else print("\n".join(names))
        return 0
    if args.evolution:
        return _evolution(evolution_table(), args.json)
    if bool(args.config) == bool(args.preset):
        raise UserError("give a config name or path, or --preset NAME (one of them)")
    a = anatomy_of_preset(args.preset, args.tokens) if args.preset else anatomy_of(
        args.config, args.tokens)
    if args.json:
        print_json(a.to_json())
        return 0
    m = a.model
    print(f"{a.name}: {a.source}")
    print(f"{m.n_layers} layers, d {m.d_model}, {m.n_heads} heads x {m.head_size} "
          f"({m.kv_heads} K/V heads), {m.ffn} FFN {m.d_model} -> {m.ffn_hidden} "
          f"({a.ffn_multiple:.2f}d), vocab {m.vocab_size}")
    print(f"\nShapes for T = {a.tokens} tokens:")
    for stage, shape in a.shapes:
        print(f"  {stage:<32} [{' x '.join(map(str, shape))}]")
    print("\nData flow:")
    print_lines([*table(
        ["stage", "output", "per layer", "layers", "parameters"],
        [(st.key, " x ".join(map(str, st.shape)) or "-",
          "-" if st.layers is None else f"{st.params_per_layer:,}",
          "-" if st.layers is None else st.layers,
          "tied to the embedding" if st.tied else f"{st.params:,}") for st in a.stages],
        left={0, 1}), *legend(("stage", "in forward order"),
                              ("output", "the stage's output for T tokens"),
                              ("per layer", "one block's parameters in it"),
                              ("layers", "blocks that hold it"),
                              ("parameters", "all layers together"))])
    print("\nParameters:")
    rows = [(comp, f"{n:,}", f"{100 * n / a.total_params:.1f}%")
            for comp, n in a.params_by_component.items()]
    print_lines([*table(["component", "parameters", "share"],
                        rows + [("total", f"{a.total_params:,}", "100.0%")], left={0}),
                 *legend(("component", "where the weights sit"),
                         ("parameters", "how many, all layers together"),
                         ("share", "of all parameters"))])
    per = a.params_per_layer
    print(f"  per layer: attention {per['attention']:,}, ffn {per['ffn']:,}, norm {per['norm']:,}"
          f" = {per['total']:,}")
    gate = " (2 x: query | sigmoid gate)" if m.attn_gate else ""
    # the std as the config writes it (0.0123456789, not 0.0123457) and the depth-scaled
    # value from it: exact digits, "~" where rounded
    rule, depth_scaled = init_scale_text(a.init_std, a.n_writes)
    std = rule.rsplit("/√", 1)[0]
    print(f"\nFFN share {100 * a.ffn_share:.1f}%; q_proj {m.d_model} -> {a.q_proj_width}{gate}; "
          f"{a.n_writes} residual writes; init std {std}, "
          f"{std}/sqrt(2L) = {std}/sqrt({a.n_writes}) = {depth_scaled}")
    if a.layer_kinds:
        print("trunk: " + ", ".join(f"{n} {kind} layers" for kind, n in a.layer_kinds)
              + f" (per linear-attention layer {per['linear_attention']:,})")
    print(f"FFN share = {a.share_definition}")
    if a.text_ffn_share is not None:
        print(f"text-only FFN share {100 * a.text_ffn_share:.1f}% = {a.text_share_definition}")
    return 0


def _evolution(rows: list[dict], as_json: bool) -> int:
    if as_json:
        print_json(rows)
        return 0
    print_lines([
        *table(["generation", "model", "FFN", "d -> d_ff", "x d", "FFN %", "q_proj", "norm",
                "writes", "params"],
               [(r["generation"], r["name"], r["ffn"], f"{r['d_model']} -> {r['d_ff']}",
                 f"{r['ffn_multiple']:.2f}", f"{100 * r['ffn_share']:.1f}", r["q_proj_width"],
                 f"{r['placement']}-{r['norm']}", r["n_writes"], f"{r['total_params']:,}")
                for r in rows], left={0, 1, 2, 7}, indent=""),
        *legend(("FFN", "the FFN's kind"), ("d -> d_ff", "FFN width, in and hidden"), ("x d", "d_ff / d"),
                ("FFN %", "FFN parameters / all parameters"),
                ("q_proj", "query projection's output width (twice the heads' width with "
                 "an output gate)"), ("norm", "where the norm sits and which one"),
                ("writes", "residual writes, 2 per layer"), ("params", "all parameters"),
                indent=""),
    ])
    return 0
