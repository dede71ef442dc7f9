"""`depthlab probe run` (alias `depthlab hf probe`): the field's real-model probes of a run
directory on the learner's prompt. One parser and one handler for both names."""

from __future__ import annotations

import argparse
import sys

from depthlab.cli.common import parse_ids, print_json
from depthlab.cli.realmodel_report import print_realmodel
from depthlab.probes.realmodel_plot import plot_realmodel  # matplotlib, only for --plot
from depthlab.threads import add_threads_arg, check_threads

HOME = "depthlab probe run"
EXAMPLE = "runs/course-shakespeare-char-s1337"


def add_run_probe(sub: argparse._SubParsersAction, name: str, alias: bool = False) -> None:
    """Register the run probe as `name` under `sub`; `alias` marks a second name for it."""
    what = ("Measure a run directory (one you trained, or a model imported from Hugging Face "
            "or a GGUF) on one prompt: the residual stream's RMS after each write beside "
            "sqrt(1 + k), each write's size relative to the stream it lands in and the angle it "
            "turns the stream by; the first token's attention share per layer and head against "
            "uniform causal attention; massive activations (largest |activation|, its dimension "
            "and token, against the median); token collapse; the logit lens after every sublayer "
            "with the final norm recomputed (and the cached-scale entropy beside it); the LM "
            "loss's gradient at each sublayer; the loss change when each block is skipped; the "
            "target's logit split into the embedding's and every write's direct contribution "
            "(their sum checked against the real logit); the token's path through the stream "
            "on two principal components; the logit-lens grid (top tokens at every block output "
            "and position); and every head's attention map (--json). "
            f"Example: {HOME} {EXAMPLE} --prompt 'The capital of France is' --target ' Paris'")
    summary = "the field's real-model probes of a run on your prompt"
    pr = sub.add_parser(name, help=f"alias of `{HOME}`: {summary}" if alias else summary,
                        description=f"Alias of `{HOME}`. {what}" if alias else what)
    pr.add_argument("run_dir", metavar="RUN_DIR")
    src = pr.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", metavar="TEXT", help="text, encoded with the run's tokenizer.json")
    src.add_argument("--ids", metavar="ID,ID,...", help="token ids, comma-separated")
    pr.add_argument("--target", metavar="TEXT|ID",
                    help="the token the logit lens follows: an id (all digits) or text, whose first "
                    "token is used (default: the model's own top-1 next token)")
    pr.add_argument("--position", type=int, metavar="N",
                    help="the token whose target logit is split into its writes and whose path "
                    "is drawn, from 0 (negative: from the end; default: the last); past a "
                    "model's learned positions the prompt's last context_len tokens are read")
    pr.add_argument("--device", default="cpu", choices=("cpu", "cuda", "mps"),
                    help="cpu (default), cuda or mps")
    pr.add_argument("--json", action="store_true", help="print JSON instead of tables")
    pr.add_argument("--plot", metavar="FILE.png|svg", help="also draw the six panels to a file")
    add_threads_arg(pr)
    pr.set_defaults(handler=run_probe)


def run_probe(args: argparse.Namespace) -> int:
    from depthlab.probes.realmodel import probe_run_dir  # torch: only when the command runs
    from depthlab.train.runtime import pick_device

    if args.ids is not None:
        prompt = parse_ids(args.ids, "--ids")
    else:
        prompt = args.prompt
    check_threads(args.threads)
    target = int(args.target) if args.target is not None and args.target.isdigit() else args.target
    result = probe_run_dir(args.run_dir, prompt, target=target,
                           device=str(pick_device(args.device, field="--device")),
                           threads=args.threads, position=args.position)
    if result["cropped"]:
        print(f"depthlab: note: the model has {len(result['prompt_ids'])} learned positions; "
              f"the probes read the prompt's last {len(result['prompt_ids'])} tokens (the first "
              f"{result['cropped']} dropped), as generate does", file=sys.stderr)
    if args.plot:
        plot_realmodel(result, args.plot)
    if args.json:
        print_json(result)
        return 0
    print_realmodel(result)
    return 0
