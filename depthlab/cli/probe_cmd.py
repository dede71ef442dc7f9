"""`depthlab probe ...`: the lesson's live experiments and exact arithmetic, as tables or JSON.

The toggles (--residual, --prenorm, --scale-writes) describe the improved row; the plain
row is always the naive stack x <- F(x) with the same N, g and seed. `--json` prints the
toggled stack at the top level (with no toggles that is the plain stack) and the plain
row under "plain". Depth is 1..256 here; the page's slider stops at 64.
"""

from __future__ import annotations

import argparse

from depthlab.cli.common import add_config_args, config_from_args, print_json
from depthlab.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help="live experiments on random stacks; exact arithmetic",
                       description=__doc__.split("\n\n", 1)[1])
    psub = p.add_subparsers(title="probes", metavar="PROBE", parser_class=type(p))

    g = psub.add_parser("gradflow", help="does the gradient reach the bottom? (--sweep: over g)",
                        description="Per-sublayer gradient relative to the top, bottom/top "
                        "ratio and stream RMS. Example: depthlab probe gradflow --depth 32 "
                        "--gain 0.5 --residual")
    _stack_args(g, default_gain=1.0)
    g.add_argument("--sweep", action="store_true",
                   help="the ratio over 31 gains in [0.5, 2.0], plain and improved rows")
    g.set_defaults(handler=gradflow)

    c = psub.add_parser("collapse", help="do the tokens become the same vector?",
                        description="Attention-only stack (6 tokens): relative distance from "
                        "'all tokens identical' and mean pairwise cosine per layer. Example: "
                        "depthlab probe collapse --depth 32 --residual --prenorm --scale-writes")
    _stack_args(c, default_gain=1.0)
    c.add_argument("--ffn", action="store_true", help="a tanh FFN after every attention layer")
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
    pa.add_argument("--scale", type=float, default=0.5, help="a in F(x) = a x")
    pa.add_argument("--x0", type=float, default=1.0, help="the input")
    pa.add_argument("--json", action="store_true", help="print JSON instead of a table")
    pa.set_defaults(handler=paths)

    n = psub.add_parser("norms", help="LayerNorm vs RMSNorm of a vector, every intermediate",
                        description="Example: depthlab probe norms 3 4")
    n.add_argument("values", nargs="+", metavar="X", help="the vector's entries")
    n.add_argument("--eps", type=float, default=1e-5)
    n.add_argument("--json", action="store_true", help="print JSON instead of a table")
    n.set_defaults(handler=norms)

    from depthlab.cli.hf_cmd import add_run_probe

    add_run_probe(psub, "run", "depthlab probe run runs/course-shakespeare-char-s1337")
    p.set_defaults(handler=lambda a: p.print_help() or 2)


def _output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--plot", metavar="FILE.png|svg", help="also draw the result to a file")


def _stack_args(p: argparse.ArgumentParser, default_gain: float) -> None:
    p.add_argument("--depth", type=int, default=32, help="sublayers N (1..256; the page: 1..64)")
    p.add_argument("--gain", type=float, default=default_gain, help="init gain g > 0")
    p.add_argument("--residual", action="store_true", help="improved row: x + F(x)")
    p.add_argument("--prenorm", action="store_true", help="improved row: RMSNorm on the input")
    p.add_argument("--scale-writes", action="store_true", help="improved row: write x 1/sqrt(N)")
    p.add_argument("--seed", type=int, default=0)
    _output_args(p)


def _request(args: argparse.Namespace, **extra: object):
    from depthlab.probes import StackRequest, use_single_thread

    use_single_thread()
    return StackRequest(depth=args.depth, gain=args.gain, residual=args.residual,
                        prenorm=args.prenorm, scale_writes=args.scale_writes, seed=args.seed,
                        **extra)


def _sci(values: list[float] | tuple[float, ...]) -> str:
    return " ".join(f"{v:.2e}" for v in values)


def gradflow(args: argparse.Namespace) -> int:
    from depthlab.probes import gain_sweep, gradient_reach

    req = _request(args)
    if args.sweep:
        sweep = gain_sweep(req)
        if args.plot:
            from depthlab.probes.plots import plot_sweep

            plot_sweep(sweep, args.plot)
        if args.json:
            print_json(sweep.to_json())
            return 0
        print(f"bottom/top gradient ratio, N={req.depth}, seed {req.seed}")
        print(f"{'g':>6}  {'plain':>10}  {req.toggles:>10}")
        for gain, plain, improved in zip(sweep.gains, sweep.plain_ratios, sweep.ratios,
                                         strict=True):
            print(f"{gain:>6.2f}  {plain:>10.2e}  {improved:>10.2e}")
        return 0
    res, plain = gradient_reach(req), gradient_reach(req.plain())
    if args.plot:
        from depthlab.probes.plots import plot_gradflow

        plot_gradflow(plain, res, args.plot)
    if args.json:
        print_json(res.to_json() | {"plain": plain.to_json()})
        return 0
    print(f"gradient reach, N={req.depth}, g={req.gain}, seed {req.seed} "
          f"(tanh two-matrix sublayers, {req.tokens} tokens of width {req.width})")
    for label, r in (("plain", plain), (req.toggles, res)):
        print(f"  {label:<28} bottom/top {r.ratio:.2e}   stream RMS {r.stream_rms[0]:.3f} -> "
              f"{r.stream_rms[-1]:.3g}")
    print("per sublayer, bottom first (gradient / top's):")
    print(f"  {'l':>3}  {'plain':>10}  {req.toggles:>10}")
    for i, (a, b) in enumerate(zip(plain.per_layer, res.per_layer, strict=True), start=1):
        print(f"  {i:>3}  {a:>10.2e}  {b:>10.2e}")
    return 0


def collapse(args: argparse.Namespace) -> int:
    from depthlab.probes import token_collapse

    req = _request(args, ffn=args.ffn)
    res, plain = token_collapse(req), token_collapse(req.plain())
    if args.plot:
        from depthlab.probes.plots import plot_collapse

        plot_collapse(plain, res, args.plot)
    if args.json:
        print_json(res.to_json() | {"plain": plain.to_json()})
        return 0
    kind = "attention + FFN" if req.ffn else "attention only"
    print(f"token collapse, {kind}, N={req.depth}, g={req.gain}, seed {req.seed}, "
          f"{req.tokens} tokens")
    print(f"  {'layer':>5}  {'plain r':>10}  {'cos':>6}  {req.toggles + ' r':>12}  {'cos':>6}")
    for i, (a, ca, b, cb) in enumerate(zip(plain.rel_distance, plain.mean_cosine,
                                           res.rel_distance, res.mean_cosine, strict=True)):
        print(f"  {i:>5}  {a:>10.2e}  {ca:>6.3f}  {b:>12.3e}  {cb:>6.3f}")
    return 0


def growth(args: argparse.Namespace) -> int:
    from depthlab.probes import GrowthRequest, real_growth, stream_growth, use_single_thread

    use_single_thread()
    res = stream_growth(GrowthRequest(writes=args.writes, samples=args.samples, seed=args.seed))
    real = None
    if args.real:
        from depthlab.memory import check_fits

        cfg = config_from_args(args)
        check_fits(cfg, batch=1, seq=max(1, args.tokens), what="probe growth --real")
        real = real_growth(cfg.model, tokens=args.tokens, seed=args.seed)
    if args.plot:
        from depthlab.probes.plots import plot_growth

        plot_growth(res, args.plot, real)
    if args.json:
        print_json(res.to_json() | ({"real": real.to_json()} if real else {}))
        return 0
    print(f"{args.writes} independent unit-variance writes, {args.samples} x 64 samples")
    print(f"  {'writes':>6}  {'measured RMS':>12}  {'sqrt(1+k)':>9}")
    marks = sorted({0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, args.writes})
    for k in (k for k in marks if k <= args.writes):
        print(f"  {k:>6}  {res.measured_rms[k]:>12.3f}  {res.expected[k]:>9.3f}")
    if real:
        m = real.request.model
        print(f"\nreal model at init ({m.n_layers} blocks = {m.n_writes} writes, d {m.d_model}, "
              f"{real.request.tokens} tokens): stream RMS")
        for row in real.rows:
            print(f"  {row.label:<38} {row.stream_rms[0]:.4f} -> {row.stream_rms[-1]:.4f}  "
                  f"(x{row.growth:.2f})")
    return 0


def paths(args: argparse.Namespace) -> int:
    from depthlab.probes import residual_paths

    p = residual_paths(args.depth, args.scale, args.x0)
    if args.json:
        print_json(p.to_json())
        return 0
    a = p.scale
    print(f"x_{p.depth} = (1 + {a:g})^{p.depth} x0 with F(x) = {a:g} x, x0 = {p.x0:g}")
    if p.paths:
        terms = " + ".join(f"{v:g}" for _, v in p.paths)
        print(f"  = {terms} = {p.residual_output:g}")
        for layers, v in p.paths:
            through = ", ".join(map(str, layers)) or "none (skip all)"
            print(f"    through layers {through:<18} {v:g}")
    print(f"  {'k layers passed':>16}  {'paths C(N,k)':>12}  {'a^k':>10}  {'sum':>12}")
    for grp in p.groups:
        print(f"  {grp.layers_passed:>16}  {grp.n_paths:>12}  {grp.value_each:>10.4g}  "
              f"{grp.total:>12.4g}")
    print(f"residual stack: {p.residual_output:.6g}; plain stack keeps only k = N: "
          f"{p.plain_output:.6g}")
    print(f"Jacobian: prod (1 + dF/dx) = {p.jacobian:.6g}; plain: prod dF/dx = "
          f"{p.plain_jacobian:.6g}")
    return 0


def norms(args: argparse.Namespace) -> int:
    from depthlab.probes import compare_norms

    try:
        values = [float(v) for v in args.values]
    except ValueError:
        raise UserError(f"norms needs numbers, got {' '.join(args.values)!r}") from None
    n = compare_norms(values, args.eps)
    if args.json:
        print_json(n.to_json())
        return 0
    vec = lambda xs: "[" + ", ".join(f"{v:.4f}" for v in xs) + "]"
    print(f"x = {vec(n.x)}   (eps {n.eps:g}, gamma 1, beta 0)")
    print(f"LayerNorm: mean {n.mean:.4f}, x - mean {vec(n.centred)}, variance {n.variance:.4f}"
          f" -> {vec(n.layernorm)}")
    print(f"RMSNorm:   mean of squares {n.mean_square:.4f}, RMS {n.rms:.4f} -> {vec(n.rmsnorm)}")
    return 0
