"""`depthlab probe ...`: the lesson's live experiments and exact arithmetic, as tables or JSON.

The improved stack is wired with the model's own switches: --residual NAME (a name of the
model's residual registry, listed in each probe's --help; `--residual` alone is plain) and
--norm rmsnorm|none (RMSNorm on each sublayer's input). residual=scaled multiplies every
write by 1/sqrt(N), N the writes of the toy stack. The naive row is always x <- F(x) with
the same N, g and seed. `--json` prints {"kind", "request", "naive", "improved"}, the
shape the page's API sends. The old flags --prenorm (= --norm rmsnorm) and --scale-writes
(with --residual: = --residual scaled) still work. Depth is 1..256 here; the page's slider
stops at 64.
"""

from __future__ import annotations

import argparse
import math
import sys

from depthlab.cli.common import add_config_args, config_from_args, print_json
from depthlab.cli.run_probe_cmd import add_run_probe
from depthlab.cli.table import legend, print_lines, table
from depthlab.config import RESIDUALS
from depthlab.errors import UserError
from depthlab.memory import check_fits
from depthlab.numtext import NumberTextError, parse_numbers
from depthlab.probes import compare_norms, plots, residual_paths, use_single_thread
from depthlab.probes.plots import plot_growth, plot_sweep
from depthlab.probes.simulator_bounds import HYBRID_KINDS, MAX_DEPTH, NORMS, PAGE_MAX_DEPTH, SIM_MIXERS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help="live experiments on random stacks; exact arithmetic",
                       description=__doc__.split("\n\n", 1)[1])
    psub = p.add_subparsers(title="probes", metavar="PROBE", parser_class=type(p))

    g = psub.add_parser("gradflow", help="does the gradient reach the bottom? (--sweep: over g)",
                        description="Per-sublayer gradient relative to the top, bottom/top "
                        "ratio and stream RMS. Example: depthlab probe gradflow --depth 32 "
                        "--gain 0.5 --residual plain")
    _stack_args(g, default_gain=1.0)
    g.add_argument("--mixer", default="attention", metavar="NAME",
                   help="gradient mode has no token mixer (its sublayer tanh(x W1) W2 acts on "
                   "each token alone), so any value but attention is refused; see probe collapse")
    g.add_argument("--sweep", action="store_true",
                   help="the ratio over 31 gains in [0.5, 2.0], naive and improved rows")
    g.set_defaults(handler=gradflow)

    c = psub.add_parser("collapse", help="do the tokens become the same vector?",
                        description="Attention-only stack (6 tokens): relative distance from "
                        "'all tokens identical' and mean pairwise cosine per layer. Example: "
                        "depthlab probe collapse --depth 32 --residual scaled --norm rmsnorm")
    _stack_args(c, default_gain=1.0)
    c.add_argument("--ffn", action="store_true", help="a tanh FFN after every attention layer")
    c.add_argument("--mixer", choices=SIM_MIXERS, default="attention", metavar="NAME",
                   help="the token mixer of every layer, both rows: one of "
                   f"{', '.join(SIM_MIXERS)} (default attention; gated_deltanet: a random "
                   "one-head gated delta rule; hybrid: layers repeat "
                   f"{'/'.join(HYBRID_KINDS)}, the lesson anchor's 3:1)")
    c.set_defaults(handler=collapse)

    w = psub.add_parser("growth", help="the residual stream grows like sqrt(1 + writes)",
                        description="W independent unit-variance writes vs sqrt(1 + W); with "
                        "--real, the RMS after each write of a real model at init, with and "
                        "without 0.02/sqrt(2L) and the 1/sqrt(N) write-back.")
    w.add_argument("--writes", type=int, default=128, help="number of writes (default 128)")
    w.add_argument("--samples", type=int, default=256, help="independent streams averaged")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--real", action="store_true", help="also measure a real model (--preset/--set)")
    w.add_argument("--tokens", type=int, default=32, help="tokens for --real")
    add_config_args(w)
    _output_args(w)
    w.set_defaults(handler=growth)

    pa = psub.add_parser("paths", help="residual expansion: prod (1 + a) as a sum over paths",
                         description="Example: depthlab probe paths --depth 2 --scale 0.5")
    pa.add_argument("--depth", type=int, default=2, help="layers N (1..64)")
    pa.add_argument("--scale", default="0.5",
                    help="a in F(x) = a x, a decimal read exactly (-0.1 is -1/10)")
    pa.add_argument("--x0", default="1", help="the input, a decimal read exactly")
    pa.add_argument("--json", action="store_true", help="print JSON instead of a table")
    pa.set_defaults(handler=paths)

    n = psub.add_parser("norms", help="LayerNorm vs RMSNorm of a vector, every intermediate",
                        description="Example: depthlab probe norms 3 4")
    n.add_argument("values", nargs="+", metavar="X", help="the vector's entries")
    n.add_argument("--eps", type=float, default=1e-5)
    n.add_argument("--json", action="store_true", help="print JSON instead of a table")
    n.set_defaults(handler=norms)

    add_run_probe(psub, "run")
    p.set_defaults(handler=lambda a: p.print_help() or 2)


def _output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--plot", metavar="FILE.png|svg", help="also draw the result to a file")


def _stack_args(p: argparse.ArgumentParser, default_gain: float) -> None:
    p.add_argument("--depth", type=int, default=32,
                   help=f"sublayers N (1..{MAX_DEPTH}; the page: 1..{PAGE_MAX_DEPTH})")
    p.add_argument("--gain", type=float, default=default_gain, help="init gain g > 0")
    p.add_argument("--residual", nargs="?", const="plain", default="none", choices=RESIDUALS,
                   metavar="NAME", help="improved row: the model's residual, one of "
                   f"{', '.join(RESIDUALS)} (default none; the flag alone: plain)")
    p.add_argument("--norm", choices=NORMS, default="none",
                   help="improved row: rmsnorm on each sublayer's input, or none (default)")
    p.add_argument("--prenorm", dest="norm", action="store_const", const="rmsnorm",
                   help="old spelling of --norm rmsnorm")
    p.add_argument("--scale-writes", action="store_true",
                   help="old spelling: with --residual, the same as --residual scaled")
    p.add_argument("--x0-mix", action="store_true",
                   help="improved row: mix the normalised input back in before every layer, "
                   "x <- resid_l x + x0_l x0 (model.x0_mix, nanochat's init)")
    p.add_argument("--seed", type=int, default=0)
    _output_args(p)


def _request(args: argparse.Namespace, **extra: object):
    from depthlab.probes import StackRequest

    use_single_thread()
    residual = args.residual
    if args.scale_writes:
        if residual not in ("plain", "scaled"):
            raise UserError(f"--scale-writes: the 1/sqrt(N) write scale is residual=scaled and "
                            f"needs a skip path; use --residual scaled (got --residual {residual})")
        residual = "scaled"
    return StackRequest(depth=args.depth, gain=args.gain, residual=residual, norm=args.norm,
                        x0_mix=args.x0_mix, seed=args.seed, mixer=args.mixer, **extra)


def _plot(draw, path: str, *results: object) -> None:
    """Draw with one of depthlab.probes.plots' functions and say where the file went."""
    draw(*results, path)
    print(f"depthlab: wrote the plot to {path}", file=sys.stderr)


def _plot_or_json(args: argparse.Namespace, plotter: str, both) -> bool:
    """--plot draws the naive and the switched stack (matplotlib loads only then); --json
    prints the one JSON shape and ends the command (True)."""
    if args.plot:
        _plot(getattr(plots, plotter), args.plot, both.naive, both.improved)
    if args.json:
        print_json(both.to_json())
    return bool(args.json)


def _columns(req) -> list[tuple[str, str]]:
    """The compared stacks: naive, and the switched one when a switch is set."""
    stacks = [("naive", "the naive stack x <- F(x)")]
    if req.label != "naive":
        mix = ", the input mixed back in before every layer (x0_mix)" if req.x0_mix else ""
        stacks.append((req.label, f"the same N, g and seed with residual={req.residual}, "
                       f"norm={req.norm}{mix}"))
    return stacks


def _no_switch_note(req) -> list[str]:
    if req.label != "naive":
        return []
    return ["no switch set: the improved stack equals the naive one (add --residual NAME "
            "or --norm rmsnorm)"]


def _refuse_underflow(req, both, fields: tuple[str, ...], what: str, quantity: str) -> None:
    """A gain so small that a stack's numbers underflow float64 (weights ~ g/sqrt(width)
    multiply the stream and its gradients by about g per layer) makes its ratios 0/0:
    one line saying so, not a table of nan."""
    stacks = [("naive", both.naive)] + ([(req.label, both.improved)]
                                        if req.label != "naive" else [])
    bad = [name for name, r in stacks if not all(
        math.isfinite(v) for f in fields
        for v in (getattr(r, f) if isinstance(getattr(r, f), tuple) else (getattr(r, f),)))]
    if bad:
        raise UserError(f"--gain {req.gain!r}: in the {' and '.join(bad)} stack the {what} "
                        f"underflow to 0 in float64 at this gain, so its {quantity} are 0/0, "
                        "not numbers; give a larger --gain")


def gradflow(args: argparse.Namespace) -> int:
    from depthlab.probes import compare, gain_sweep

    req = _request(args)
    stacks = _columns(req)
    if args.sweep:
        sweep = gain_sweep(req)
        if args.plot:
            _plot(plot_sweep, args.plot, sweep)
        if args.json:
            print_json(sweep.to_json())
            return 0
        rows = [(f"{gain:.2f}", f"{naive:.2e}", f"{improved:.2e}")[:1 + len(stacks)]
                for gain, naive, improved in zip(sweep.gains, sweep.naive_ratios, sweep.ratios,
                                                 strict=True)]
        print_lines([f"bottom/top gradient ratio over the init gain, N={req.depth}, "
                     f"seed {req.seed}", *_no_switch_note(req),
                     *table(["g"] + [name for name, _ in stacks], rows),
                     *legend(("g", "init gain of every weight matrix"),
                             *((name, f"bottom/top gradient ratio of {what}")
                               for name, what in stacks))])
        return 0
    both = compare(req, "gradient")
    _refuse_underflow(req, both, ("ratio", "per_layer"), "gradients", "bottom/top ratios")
    if _plot_or_json(args, "plot_gradflow", both):
        return 0
    results = [both.naive, both.improved][:len(stacks)]
    summary = [(name, f"{r.ratio:.2e}", f"{r.stream_rms[0]:.3f}", f"{r.stream_rms[-1]:.3g}")
               for (name, _), r in zip(stacks, results, strict=True)]
    per_layer = [(i, *(f"{r.per_layer[i - 1]:.2e}" for r in results))
                 for i in range(1, req.depth + 1)]
    print_lines([
        f"gradient reach, N={req.depth}, g={req.gain}, seed {req.seed} "
        f"(tanh two-matrix sublayers, {req.tokens} tokens of width {req.width})",
        *_no_switch_note(req),
        *table(["stack", "bottom/top", "RMS in", "RMS out"], summary, left={0}),
        *legend(("stack", "; ".join(f"{name}: {what}" for name, what in stacks)),
                ("bottom/top", "gradient at the bottom sublayer's input / at the top's"),
                ("RMS in, RMS out", "stream RMS at the input and after the last sublayer")),
        "",
        "per sublayer, bottom first:",
        *table(["l"] + [name for name, _ in stacks], per_layer),
        *legend(("l", "sublayer, 1 = bottom"),
                (", ".join(name for name, _ in stacks),
                 "gradient at sublayer l's input / at the top's, in that stack")),
    ])
    return 0


def collapse(args: argparse.Namespace) -> int:
    from depthlab.probes import compare

    req = _request(args, ffn=args.ffn)
    stacks = _columns(req)
    both = compare(req, "collapse")
    if req.mixer == "attention":  # a DeltaNet stack's stream can vanish at any gain: shown
        _refuse_underflow(req, both, ("rel_distance", "mean_cosine"), "stream's tokens",
                          "distances and cosines")
    if _plot_or_json(args, "plot_collapse", both):
        return 0
    results = [both.naive, both.improved][:len(stacks)]
    cell = lambda v, spec: format(v, spec) if math.isfinite(v) else "0/0"
    rows = [(i, *(c for r in results
                  for c in (cell(r.rel_distance[i], ".2e"), cell(r.mean_cosine[i], ".3f"))))
            for i in range(len(both.naive.rel_distance))]
    mixer = {"attention": "attention", "gated_deltanet": "Gated DeltaNet",
             "hybrid": "hybrid 3 DeltaNet : 1 attention"}.get(req.mixer, req.mixer)
    kind = f"{mixer} + FFN" if req.ffn else f"{mixer} only"
    vanished = any(not math.isfinite(v) for r in results for v in r.rel_distance)
    print_lines([
        f"token collapse, {kind}, N={req.depth}, g={req.gain}, seed {req.seed}, "
        f"{req.tokens} tokens",
        *_no_switch_note(req),
        *table(["layer"] + [f"{name} {q}" for name, _ in stacks for q in ("r", "cos")], rows),
        *legend(("layer", "after that many layers, 0 = the input"),
                ("r", "distance from all tokens equal, |X - mean token| / |X|: 0 = collapsed"),
                ("cos", "mean cosine over pairs of tokens: 1 = collapsed"),
                *stacks,
                *([("0/0", "the stream underflowed to exactly 0 in float64: no direction "
                   "left to compare (a DeltaNet layer's write shrinks the stream)")]
                  if vanished else [])),
    ])
    return 0


def growth(args: argparse.Namespace) -> int:
    from depthlab.probes import GrowthRequest, real_growth, stream_growth

    use_single_thread()
    res = stream_growth(GrowthRequest(writes=args.writes, samples=args.samples, seed=args.seed))
    real = None
    if args.real:
        cfg = config_from_args(args)
        check_fits(cfg, batch=1, seq=max(1, args.tokens), what="probe growth --real")
        real = real_growth(cfg.model, tokens=args.tokens, seed=args.seed)
    if args.plot:
        _plot(plot_growth, args.plot, res, real)
    if args.json:
        print_json(res.to_json() | ({"real": real.to_json()} if real else {}))
        return 0
    marks = sorted({0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, args.writes})
    rows = [(k, f"{res.measured_rms[k]:.3f}", f"{res.expected[k]:.3f}")
            for k in marks if k <= args.writes]
    lines = [f"{args.writes} independent unit-variance writes, {args.samples} x 64 samples",
             *table(["writes", "measured RMS", "sqrt(1+k)"], rows),
             *legend(("writes", "k writes added to a unit-RMS stream"),
                     ("measured RMS", "RMS of the stream after k writes"),
                     ("sqrt(1+k)", "what independent unit writes give"))]
    if real:
        m = real.request.model
        lines += ["", f"real model at init ({m.n_layers} blocks = {m.n_writes} writes, "
                  f"d {m.d_model}, {real.request.tokens} tokens): stream RMS",
                  *table(["init", "RMS in", "RMS out", "growth"],
                         [(row.label, f"{row.stream_rms[0]:.4f}", f"{row.stream_rms[-1]:.4f}",
                           f"x{row.growth:.2f}") for row in real.rows], left={0}),
                  *legend(("init", "output projections' init and write-back"),
                          ("RMS in, RMS out", "stream RMS after the embedding and after the "
                           "last write"), ("growth", "RMS out / RMS in"))]
    print_lines(lines)
    return 0


def paths(args: argparse.Namespace) -> int:
    p = residual_paths(args.depth, args.scale, args.x0)
    if args.json:
        print_json(p.to_json())
        return 0
    j = p.to_json()
    a = j["scale_text"]
    lines = [f"x_{p.depth} = (1 + {a})^{p.depth} x0 with F(x) = {a} x, x0 = {j['x0_text']}; "
             f"{j['n_paths_text']} paths. Exact: integers in full, '~' marks a value rounded "
             "to 12 significant digits"]
    if p.paths:
        lines.append(f"  = {' + '.join(q['value_text'] for q in j['paths'])} = "
                     f"{j['residual_output_text']}")
        lines += table(["through layers", "value"],
                       [(", ".join(map(str, q["layers"])) or "none (skips all)", q["value_text"])
                        for q in j["paths"]], left={0}, indent="    ")
        lines += legend(("through layers", "the sublayers a path goes through"),
                        ("value", "what it carries, a^k x0"), indent="    ")
    lines += table(["k", "paths C(N,k)", "a^k x0", "sum"],
                   [(g["layers_passed"], g["n_paths_text"], g["value_each_text"], g["total_text"])
                    for g in j["groups"]])
    lines += legend(("k", "layers a path goes through (the others it skips)"),
                    ("paths C(N,k)", "how many paths do"), ("a^k x0", "what one of them carries"),
                    ("sum", "C(N,k) a^k x0, their total"))
    lines += [f"residual stack: the sum = {j['residual_output_text']}; plain stack keeps only "
              f"k = N: {j['plain_output_text']}",
              f"Jacobian: prod (1 + dF/dx) = ({j['jacobian_factor_text']})^{p.depth} = "
              f"{j['jacobian_text']}; plain: prod dF/dx = {j['plain_jacobian_text']}"]
    print_lines(lines)
    return 0


def norms(args: argparse.Namespace) -> int:
    try:  # "3 4", "3,4", "３，４": the page's rules
        values = parse_numbers(" ".join(args.values))
    except NumberTextError:
        raise UserError(f"norms needs numbers, got {' '.join(args.values)!r}") from None
    if not values:
        raise UserError("norms needs at least one number")
    n = compare_norms(values, args.eps)
    if args.json:
        print_json(n.to_json())
        return 0
    vec = lambda xs: "[" + ", ".join(f"{v:.4f}" for v in xs) + "]"
    print(f"x = {vec(n.x)}   (eps {n.eps:g}, gamma 1, beta 0)")
    print(f"LayerNorm: mean {n.mean:.4f}, x - mean {vec(n.centred)}, variance {n.variance:.4f}"
          f" -> {vec(n.layernorm)}")
    print(f"RMSNorm:   mean of squares {n.mean_square:.4f}, RMS {n.rms:.4f} -> {vec(n.rmsnorm)}")
    change = lambda v: "-" if v is None else f"{v:.2g}"
    print("scaled: " + "; ".join(f"x * {s.factor:g} changes LayerNorm by up to "
                                 f"{change(s.layernorm_change)}, RMSNorm by up to "
                                 f"{change(s.rmsnorm_change)}" for s in n.scaled)
          + f" (eps {n.eps:g} is added to the variance and the mean of squares)")
    return 0
