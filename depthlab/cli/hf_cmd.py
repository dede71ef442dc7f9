"""`depthlab hf import | export | probe`: Hugging Face checkpoints in and out, and the
lesson's probes on a pretrained model's blocks."""

from __future__ import annotations

import argparse

from depthlab.cli.common import print_json
from depthlab.cli.table import legend, print_lines, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hf", help="import/export Hugging Face Llama, Qwen2, Qwen3 checkpoints")
    hsub = p.add_subparsers(title="actions", metavar="ACTION", parser_class=type(p))

    i = hsub.add_parser(
        "import", help="Hugging Face checkpoint directory -> depthlab run directory",
        description="Read config.json and model.safetensors (or the shards listed in "
        "model.safetensors.index.json) of a LlamaForCausalLM, Qwen2ForCausalLM or "
        "Qwen3ForCausalLM checkpoint and write a run directory that generate, next-token, the "
        "probes and the page accept; tokenizer.json is copied when present. Example: "
        "depthlab hf import ~/models/Qwen3-0.6B --out runs/qwen3-0.6b")
    i.add_argument("hf_dir", metavar="HF_DIR", help="directory with config.json + safetensors")
    i.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory to write")
    i.add_argument("--keep-dtype", action="store_true",
                   help="store the weights in the checkpoint's dtype (e.g. bfloat16, half the "
                   "disk) instead of float32; the model computes in float32 either way")
    i.add_argument("--force", action="store_true", help="overwrite an existing run directory")
    i.set_defaults(handler=import_cmd)

    e = hsub.add_parser(
        "export", help="depthlab run directory -> Hugging Face checkpoint directory",
        description="Write config.json + model.safetensors (float32) that "
        "transformers.AutoModelForCausalLM.from_pretrained loads: Llama, or Qwen2 when the run "
        "has model.qkv_bias, or Qwen3 when it has model.qk_norm. Runs with switches Llama/Qwen "
        "lack (residual, placement, norm, attn_gate, ffn, ffn_clamp, position, final_norm) are "
        "refused. Example: depthlab hf export runs/llama-tiny --out hf/llama-tiny")
    e.add_argument("run_dir", metavar="RUN_DIR")
    e.add_argument("--out", required=True, metavar="HF_DIR", help="checkpoint directory to write")
    e.add_argument("--force", action="store_true", help="overwrite an existing checkpoint")
    e.set_defaults(handler=export_cmd)

    add_run_probe(hsub, "probe", "depthlab hf probe runs/qwen3-0.6b")
    p.set_defaults(handler=lambda a: p.print_help() or 2)


def add_run_probe(sub: argparse._SubParsersAction, name: str, example: str) -> None:
    """The probes on a run directory (trained or imported), as `hf probe` and `probe run`."""
    pr = sub.add_parser(
        name, help="stream growth, gradient reach and collapse of a run on your prompt",
        description="Measure a run directory (one you trained, or an imported pretrained "
        "model) on one prompt: residual-stream RMS after each write, the LM loss's gradient "
        "norm arriving at each sublayer, and token collapse per write. Example: "
        f"{example} --prompt 'The residual stream carries'")
    pr.add_argument("run_dir", metavar="RUN_DIR")
    src = pr.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", metavar="TEXT", help="text, encoded with the run's tokenizer.json")
    src.add_argument("--ids", metavar="ID,ID,...", help="token ids, comma-separated")
    pr.add_argument("--device", default="cpu", help="cpu | cuda | mps (default: cpu)")
    pr.add_argument("--json", action="store_true", help="print JSON instead of tables")
    pr.set_defaults(handler=probe_cmd)


def import_cmd(args: argparse.Namespace) -> int:
    from depthlab.hf import import_checkpoint

    r = import_checkpoint(args.hf_dir, args.out, dtype=None if args.keep_dtype else _f32(),
                          force=args.force)
    m = r.config.model
    print(f"imported {r.architecture}: {m.n_layers} blocks, d_model {m.d_model}, "
          f"{m.n_heads} heads / {m.kv_heads} K/V heads of {m.head_size}, d_ff {m.ffn_hidden}, "
          f"vocab {m.vocab_size}, {r.n_params:,} parameters"
          f"{', tokenizer.json' if r.tokenizer else ''} -> {r.out_dir}")
    return 0


def export_cmd(args: argparse.Namespace) -> int:
    from depthlab.hf import export_run

    r = export_run(args.run_dir, args.out, force=args.force)
    print(f"exported {r.architecture} ({r.n_params:,} parameters, float32"
          f"{', tokenizer.json' if r.tokenizer else ''}) -> {r.out_dir}")
    return 0


def probe_cmd(args: argparse.Namespace) -> int:
    from depthlab.errors import UserError
    from depthlab.hf.probe import probe_run

    if args.ids is not None:
        try:
            prompt = [int(t) for t in args.ids.split(",") if t.strip()]
        except ValueError:
            raise UserError(f"--ids must be comma-separated integers, got {args.ids!r}") from None
    else:
        prompt = args.prompt
    result = probe_run(args.run_dir, prompt, device=args.device)
    if args.json:
        print_json(result)
        return 0
    print_lines([
        f"{result['n_tokens']} tokens, LM loss {result['loss']:.4f}", "",
        "Gradient of the LM loss arriving at each sublayer's input (bottom first):",
        *table(["sublayer", "|grad|", "/ top"],
               [(name, f"{g:.4e}", f"{rel:.4f}") for name, g, rel in
                zip(result["sublayers"], result["grad_norm"], result["per_layer"], strict=True)],
               left={0}),
        *legend(("sublayer", "block index and attention or FFN"),
                ("|grad|", "norm of dLoss/d(the sublayer's input)"),
                ("/ top", "the same over the top sublayer's")),
        "", "The residual stream after each write (0 = the embedding):",
        *table(["write", "RMS", "rel. dist.", "mean cos"],
               [(k, f"{rms:.4f}", f"{dist:.4f}", f"{cos:.4f}") for k, (rms, dist, cos) in
                enumerate(zip(result["stream_rms"], result["rel_distance"],
                              result["mean_cosine"], strict=True))]),
        *legend(("write", "writes so far"), ("RMS", "the stream's RMS"),
                ("rel. dist.", "||X - 1 mean(X)^T||_F / ||X||_F, 0 = all tokens equal"),
                ("mean cos", "mean pairwise cosine of the tokens, 1 = all parallel")),
    ])
    return 0


def _f32():  # -> torch.dtype, with torch imported only when a command runs
    import torch

    return torch.float32
