"""Hugging Face checkpoint -> depthlab run directory, and back.

Import builds our model on the `meta` device (no memory, no init), assigns the
checkpoint's tensors by name and writes a run directory every other command
reads. Export writes config.json + model.safetensors that Transformers'
`AutoModelForCausalLM.from_pretrained` loads with the same logits.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from depthlab import outdir, rundir
from depthlab.config import Config
from depthlab.errors import MAX_JSON_BYTES, UserError, read_json_object
from depthlab.hf.config_map import export_family, hf_config_from_model, run_config_from_hf
from depthlab.hf.mapping import FAMILIES
from depthlab.hf.weights import (
    SINGLE_FILE,
    hf_name,
    is_ignored,
    nested_names,
    read_tensors,
    weight_files,
)
from depthlab.memory import check_fits
from depthlab.model import Transformer

HF_CONFIG = "config.json"


@dataclass(frozen=True)
class Converted:
    """What a conversion wrote, for the CLI's report."""

    out_dir: Path
    architecture: str
    config: Config
    n_params: int
    tokenizer: bool
    left_out: str = ""  # what of the checkpoint was not imported (a vision tower), in words


def _read_json(path: Path) -> dict:
    return read_json_object(path, f"missing; is {path.parent} a Hugging Face checkpoint directory?")


def _copy_file(src: Path, dst: Path) -> None:
    rundir.atomic_write(dst, lambda tmp: shutil.copyfile(src, tmp))


def import_checkpoint(hf_dir: Path, out_dir: Path, *, dtype: torch.dtype | None = torch.float32,
                      force: bool = False) -> Converted:
    """Convert a Llama/Qwen2/Qwen3 checkpoint into a run directory.

    `dtype` None keeps the checkpoint's dtype on disk (half the size for bf16);
    `rundir.load_model` casts to the model's float32 either way.
    """
    hf_dir = Path(hf_dir)
    if not hf_dir.is_dir():
        raise UserError(f"{hf_dir}: no such directory")
    raw = _read_json(hf_dir / HF_CONFIG)
    tokenizer = hf_dir / rundir.TOKENIZER_FILE
    cfg, kind = run_config_from_hf(raw, has_tokenizer=tokenizer.exists())
    if tokenizer.exists():
        check_tokenizer_file(tokenizer, cfg.model.vocab_size)
    # the weights and RoPE's tables must fit where the run will be loaded, this machine:
    # said before the tensors are read
    check_fits(cfg, training=False, what=f"{hf_dir / HF_CONFIG}")
    files = weight_files(hf_dir)
    out_dir = outdir.check_location(out_dir)
    with outdir.claim_target(out_dir, outdir.RUN, replace=force, sources=(hf_dir,)):
        model, n_params, left_out = model_from_hf_tensors(
            cfg, kind, set(files), lambda names: read_tensors(files, names), where=str(hf_dir),
            dtype=dtype)

        def write(stage: Path) -> None:
            rundir.save_weights(stage, model)
            if tokenizer.exists():
                _copy_file(tokenizer, stage / rundir.TOKENIZER_FILE)
            rundir.write_config(stage, cfg, source={"format": "huggingface", "architecture": kind,
                                                    "path": str(hf_dir.resolve())})

        outdir.write_whole(out_dir, outdir.RUN, write, need_bytes=_bytes(model))
    return Converted(out_dir, kind, cfg, n_params, tokenizer.exists(), left_out)


def _bytes(model: torch.nn.Module) -> int:
    """The size of the model's tensors on disk (safetensors stores them as they are)."""
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def model_from_hf_tensors(cfg: Config, kind: str, available: set[str],
                          read: Callable[[list[str]], dict[str, torch.Tensor]], *, where: str,
                          dtype: torch.dtype | None = torch.float32) -> tuple[Any, int, str]:
    """Our model (weights assigned, nothing initialised) from tensors under Hugging Face
    names: `available` lists the names present, `read(names)` returns those tensors.
    Every parameter must be found and every tensor must have a place, but those of a
    multimodal checkpoint's other parts (the family's `left_out` prefixes). Returns the
    model, its parameter count and what was left out, in words ("" for nothing)."""
    with torch.device("meta"):
        model = Transformer(cfg.model)
    names = FAMILIES[kind].weights  # kind: the family run_config_from_hf found
    if names.nested_prefix and any(n.startswith(names.nested_prefix) for n in available):
        names = nested_names(names)  # the text model of a multimodal checkpoint
    skipped = {n for n in available if n.startswith(names.left_out)} if names.left_out else set()
    available = available - skipped
    wanted = {name: hf_name(name, names) for name in model.state_dict()}
    missing = [theirs for theirs in wanted.values() if theirs not in available]
    if missing:
        raise UserError(f"{where}: tensor {missing[0]!r} is missing "
                        f"({len(missing)} missing in all) for a {kind} model with this config")
    used = set(wanted.values())
    if cfg.model.tie_embeddings:
        used.add("lm_head.weight")  # a tied checkpoint may still store a copy; the head is the embedding
    extra = sorted(n for n in available if n not in used and not is_ignored(n))
    if extra:
        raise UserError(f"{where}: tensor {extra[0]!r} has no place in a {kind} model with this "
                        f"config ({len(extra)} unused in all)")

    tensors = read(list(wanted.values()))
    state = {}
    for ours_name, theirs in wanted.items():
        t = tensors.pop(theirs)
        state[ours_name] = t.to(dtype) if dtype is not None else t
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as e:
        first = str(e).split("\n\t")[1] if "\n\t" in str(e) else str(e)
        raise UserError(f"{where}: weights do not fit the config ({first.strip()})") from None
    left_out = ""
    if skipped:
        parts = sorted({p for n in skipped for p in names.left_out if n.startswith(p)})
        left_out = (f"the text model only: {len(skipped)} tensors under "
                    f"{', '.join(p.rstrip('.') for p in parts)} left out")
    return model, sum(t.numel() for t in state.values()), left_out


def check_tokenizer_file(path: Path, vocab_size: int) -> None:
    """Parse a Hugging Face tokenizer.json with the `tokenizers` library before it is copied
    into a run, and check its ids fit the model's vocabulary; else one line naming it."""
    from tokenizers import Tokenizer

    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise UserError(f"{path}: larger than {MAX_JSON_BYTES >> 20} MiB; not a tokenizer")
        n = Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)
    except UserError:
        raise
    except Exception as e:  # the library raises its own Exception for every parse error
        detail = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise UserError(f"{path}: not a tokenizer.json the tokenizers library reads ({detail}); "
                        "repair it or remove it to import without a tokenizer") from None
    if n > vocab_size:
        raise UserError(f"{path}: {n} tokens, more than the model's vocab_size {vocab_size} "
                        "(config.json); ids past it would have no embedding")


def _is_tokenizers_file(path: Path) -> bool:
    """True for a `tokenizers` JSON file (what Transformers' fast tokenizers read)."""
    if not path.exists():
        return False
    try:
        from tokenizers import Tokenizer

        Tokenizer.from_file(str(path))
    except Exception:  # any parse failure means: not a tokenizers file
        return False
    return True


def export_run(run_dir: Path, out_dir: Path, *, force: bool = False) -> Converted:
    """Write a run directory as a Hugging Face checkpoint (float32, one safetensors file)."""
    from safetensors.torch import save_file

    run_dir = Path(run_dir)
    cfg, _ = rundir.read_config(run_dir)
    hf_config = hf_config_from_model(cfg.model)  # refuses before any weights are read
    out_dir = outdir.check_location(out_dir)
    with outdir.claim_target(out_dir, outdir.HF_CHECKPOINT, replace=force, sources=(run_dir,)):
        model, cfg = rundir.load_model(run_dir)
        names = export_family(cfg.model).weights
        state = {hf_name(name, names): t.detach().to(torch.float32).contiguous()
                 for name, t in model.state_dict().items()}
        tokenizer = run_dir / rundir.TOKENIZER_FILE
        has_tokenizer = _is_tokenizers_file(tokenizer)

        def write(stage: Path) -> None:
            # Transformers refuses safetensors files without format=pt in their metadata.
            rundir.atomic_write(stage / SINGLE_FILE,
                                lambda tmp: save_file(state, str(tmp), metadata={"format": "pt"}))
            if has_tokenizer:
                _copy_file(tokenizer, stage / rundir.TOKENIZER_FILE)
                # Use tokenizer.json as it is, without model-specific special-token rules.
                rundir.atomic_write_text(stage / "tokenizer_config.json", json.dumps(
                    {"tokenizer_class": "PreTrainedTokenizerFast"}, indent=2))
            rundir.atomic_write_text(stage / HF_CONFIG, json.dumps(hf_config, indent=2))

        n_params = sum(t.numel() for t in state.values())
        outdir.write_whole(out_dir, outdir.HF_CHECKPOINT, write, need_bytes=4 * n_params)
    return Converted(out_dir, hf_config["architectures"][0], cfg, n_params, has_tokenizer)
