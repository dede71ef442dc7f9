"""Tensor names and files of Hugging Face checkpoints (single or sharded safetensors).

Our names follow the lesson (`blocks.3.attn_norm_in`), Hugging Face's follow Llama
(`model.layers.3.input_layernorm`); the prefixes for each family, and llama.cpp's,
are in `depthlab/hf/mapping.py`. Only `safetensors` is needed, not Transformers.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch

from depthlab.errors import UserError
from depthlab.hf.mapping import TensorNames

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

# Buffers some older checkpoints carry; recomputed from the config, never read.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def _swap_prefix(name: str, table: tuple[tuple[str, str], ...]) -> str | None:
    for ours, theirs in table:
        if name.startswith(ours):
            return theirs + name[len(ours):]
    return None


def hf_name(name: str, names: TensorNames) -> str:
    """Our parameter name -> the family's tensor name (`blocks.0.attn.q_proj.weight` ->
    `model.layers.0.self_attn.q_proj.weight` in Llama's), by the family's table in
    depthlab/hf/mapping.py."""
    if name.startswith("blocks."):
        _, index, rest = name.split(".", 2)
        mapped = _swap_prefix(rest, names.block)
        if mapped is not None:
            return f"{names.layer_prefix}{index}.{mapped}"
    else:
        mapped = _swap_prefix(name, names.top)
        if mapped is not None:
            return mapped
    raise UserError(f"parameter {name!r} has no Hugging Face name")


def nested_names(names: TensorNames) -> TensorNames:
    """The family's names inside a multimodal checkpoint: `model.` -> its `nested_prefix`
    (model.layers.3 -> model.language_model.layers.3; lm_head stays at the top)."""
    def inside(theirs: str) -> str:
        return names.nested_prefix + theirs[len("model."):] if theirs.startswith("model.") else theirs
    return replace(names, top=tuple((o, inside(t)) for o, t in names.top),
                   layer_prefix=inside(names.layer_prefix))


def gguf_to_hf_name(name: str, names: TensorNames) -> str:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight` by the family's
    table; a name without an equivalent comes back unchanged (the import then refuses it
    as having no place)."""
    stem, _, suffix = name.rpartition(".")
    top, block = dict(names.gguf_top), dict(names.gguf_block)
    if stem in top:
        return f"{top[stem]}.{suffix}"
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in block:
        return f"{names.layer_prefix}{parts[1]}.{block[parts[2]]}.{suffix}"
    return name


def is_ignored(hf_tensor: str) -> bool:
    return hf_tensor.endswith(_IGNORED_SUFFIXES)


def _describe(path: Path, error: Exception) -> str:
    detail = " ".join(str(error).split())  # one line, whatever the library wrote
    return f"{path}: truncated or not a safetensors file ({detail})"


def weight_files(hf_dir: Path) -> dict[str, Path]:
    """Tensor name -> the file holding it, from the shard index or the single file."""
    index = hf_dir / INDEX_FILE
    single = hf_dir / SINGLE_FILE
    if index.exists():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
            raise UserError(f"{index}: not a valid shard index ({type(e).__name__}: {e})") from None
        if not isinstance(weight_map, dict):
            raise UserError(f"{index}: weight_map must be an object")
        for name, file in weight_map.items():  # a shard is a file beside the index
            if not (isinstance(file, str) and file.endswith(".safetensors")
                    and Path(file).name == file and "\\" not in file):
                raise UserError(f"{index}: weight_map[{name!r}] must name a .safetensors file "
                                f"in {hf_dir}, got {file!r}")
        files = {name: hf_dir / file for name, file in weight_map.items()}
        for path in sorted(set(files.values())):
            if not path.exists():
                raise UserError(f"{index} names {path.name}, which is missing")
        return files
    if single.exists():
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(single), framework="pt") as f:
                return {name: single for name in f.keys()}
        except (SafetensorError, OSError) as e:
            raise UserError(_describe(single, e)) from None
    if any(hf_dir.glob("*.bin")) or any(hf_dir.glob("*.pth")):
        raise UserError(f"{hf_dir}: only safetensors checkpoints are read, not pickled .bin/.pth "
                        "(convert with save_pretrained(safe_serialization=True))")
    raise UserError(f"{hf_dir}: no {SINGLE_FILE} or {INDEX_FILE}")


def read_tensors(files: dict[str, Path], names: list[str]) -> dict[str, torch.Tensor]:
    """Load the named tensors, opening each file once."""
    from safetensors import SafetensorError, safe_open

    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(files[name], []).append(name)
    out: dict[str, torch.Tensor] = {}
    for path, wanted in by_file.items():
        try:
            with safe_open(str(path), framework="pt") as f:
                present = set(f.keys())
                for name in wanted:
                    if name not in present:
                        raise UserError(f"{path}: tensor {name!r} is listed in {INDEX_FILE} "
                                        "but missing from the file")
                    out[name] = f.get_tensor(name)
        except (SafetensorError, OSError) as e:
            raise UserError(_describe(path, e)) from None
    return out
