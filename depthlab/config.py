"""Frozen, typed configs, validated in one place.

A config is the header of every run log and the cache key of every probe, so
it is a frozen (hashable) dataclass that round-trips through JSON. All checks
live in `validate`: an invalid value or combination raises one `ConfigError`
that names the field and lists what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import typing
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from depthlab import variants
from depthlab.errors import ConfigError, read_json_object
from depthlab.variants import (
    MIXER_SPECS,
    NORM_SPECS,
    RESIDUAL_SPECS,
    SHORTCUT_SPECS,
    keys_where,
)

# Registry keys: the same strings on the CLI, in config.json, the metric log and the page.
# The residuals and norms are views of their specs (depthlab.variants), so call sites keep
# these names while the facts about each variant live in one table.
NORMS = tuple(NORM_SPECS)
# Each norm's name as the block diagram and the tables print it (one entry per key of NORMS).
NORM_LABELS = {k: s.label for k, s in NORM_SPECS.items()}
PLACEMENTS = variants.PLACEMENTS
# depthlab.model.residual:
RESIDUALS = tuple(RESIDUAL_SPECS)
NORM_SCALES = ("none", "depth")  # depth: pre-norm outputs of block l times 1/sqrt(l)
MAX_STREAMS = 16
FFNS = variants.FFNS
OPTIMIZERS = ("adamw", "muon")
# The token mixer of a block: softmax attention, or Gated DeltaNet linear attention
# (depthlab.model.deltanet), each a spec of depthlab.variants. `model.layer_pattern` mixes
# the two over the layers, one letter per layer, repeated over the stack (`layer_kinds`).
MIXERS = tuple(MIXER_SPECS)
PATTERN_LETTERS = {s.letter: s.key for s in MIXER_SPECS.values()}
MAX_CONV_KERNEL = 64
# Tokens per chunk of the Gated DeltaNet's chunked form (depthlab.model.deltanet): the DeltaNet
# papers' kernels' and transformers' fallback's.
DELTANET_CHUNK = 64
POSITIONS = ("rope", "learned")

MAX_LAYERS = 1024
# Micro-batches per optimizer step: nanoGPT's 8-GPU GPT-2 recipe uses 40 per process. A
# stop (Ctrl-C, SIGTERM) is honoured between steps, so a step must stay minutes, not hours.
MAX_GRAD_ACCUM = 1024
# No optimizer setting of this field comes near: AdamW steps are ~lr per weight, so an
# lr above 10 only overflows (1e38 made AdamW raise instead of diverging).
MAX_LR = 10.0
# Every integer field fits a signed 32-bit int, and no model has more parameters than
# MAX_PARAMS (a petabyte of float32): beyond these even the `meta` device used by
# `model describe` overflows its 64-bit sizes.
MAX_INT = 2**31 - 1
MAX_PARAMS = 2**48

# The stream shortcuts' gates read the first channels of what they gate (nanochat's widths):
SMEAR_CHANNELS = 24  # smear: sigmoid(w . x[:24]) of the token's own embedding
VALUE_EMBED_GATE_CHANNELS = 12  # value embeddings: 3 sigmoid(W x[:12]), one per K/V head


def value_embed_layers(n_layers: int) -> tuple[int, ...]:
    """The layers that carry a value embedding: every other one, the last always
    (nanochat's `has_ve`: layer % 2 == (L - 1) % 2)."""
    return tuple(i for i in range(n_layers) if i % 2 == (n_layers - 1) % 2)


def middle_layer(n_layers: int) -> int:
    """The block after which backout reads the stream it subtracts (nanochat: L // 2)."""
    return n_layers // 2


def unet_source(layer: int, n_layers: int) -> int | None:
    """The block whose output a U-net skip adds to the input of `layer`: the mirror
    L-1-layer of a block in the second half (the last L // 2 blocks), else None."""
    mirror = n_layers - 1 - layer
    return mirror if mirror < n_layers // 2 else None


def residual_params_per_write(residual: str, d: int, n: int) -> int:
    """What one write's residual learns, for d_model d and n streams (its spec's
    `params`; tests/test_reliability.py holds them to the built model)."""
    return _residual(residual).params(d, n)


def _residual(key: str) -> variants.ResidualSpec:
    """The spec of a residual key; an unknown key (refused by `validate_model`, which may
    ask for the sizes first) has a plain residual's facts."""
    return RESIDUAL_SPECS.get(key, RESIDUAL_SPECS["plain"])


@dataclass(frozen=True)
class ModelConfig:
    """Every architectural switch of the lesson (see the README's tour)."""

    vocab_size: int = 2048
    context_len: int = 256
    n_layers: int = 4
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: one K/V head per query head (no grouping)
    head_dim: int | None = None  # None: d_model // n_heads
    d_ff: int | None = None  # None: 4d for relu/gelu, 8d/3 (rounded up to 16) for swiglu
    ffn: str = "swiglu"
    ffn_clamp: float | None = None  # gpt-oss style limit on the SwiGLU gate/up inputs
    norm: str = "rmsnorm"
    norm_eps: float = 1e-5
    placement: str = "pre"
    residual: str = "plain"
    norm_scale: str = "none"  # depth: LayerNorm Scaling (Sun et al. 2025), Block in_norm_scale
    value_residual: bool = False  # ResFormer: later layers mix in layer 0's V (Zhou et al. 2024)
    streams: int = 1  # copies of the residual stream, for residual=hc/mhc (hyper-connections)
    final_norm: bool = True
    qk_norm: bool = False
    attn_gate: bool = False  # sigmoid gate on the attention output (q_proj doubled)
    position: str = "rope"
    rope_theta: float = 10000.0
    bias: bool = False  # biases in every linear layer (GPT-2 style)
    qkv_bias: bool = False  # biases on q/k/v only (Qwen2 style)
    tie_embeddings: bool = True
    init_std: float = 0.02
    init_gain: float = 1.0
    scaled_init: bool = True  # output projections get init_std / sqrt(2 * n_layers)
    # Stream shortcuts of nanochat and modded-nanogpt (depthlab.model.shortcuts):
    x0_mix: bool = False  # before block i: x <- resid_i * x + x0_i * x0 (x0: normalised embedding)
    backout: bool = False  # before the final norm: x <- x - lambda * (stream after block L//2)
    value_embeds: bool = False  # alternating layers add a gated value embedding to V
    smear: bool = False  # the previous token's embedding mixed into each token's, gated
    unet_skips: bool = False  # block j's output added to block L-1-j's input, learned weight
    logit_softcap: float | None = None  # logits <- cap * tanh(logits / cap); None: no cap
    # The token mixer (depthlab.model.deltanet). mixer=gated_deltanet makes every layer a
    # Gated DeltaNet, or, with layer_pattern, the layers its letters say: "A" attention,
    # "L" linear (DeltaNet), the pattern repeated over the stack ("LLLA": Qwen3.5's 3:1).
    mixer: str = "attention"
    layer_pattern: str | None = None
    linear_key_heads: int | None = None  # None: n_heads
    linear_value_heads: int | None = None  # None: linear_key_heads (a multiple of it)
    linear_key_dim: int | None = None  # None: the attention head size
    linear_value_dim: int | None = None  # None: linear_key_dim
    linear_conv_kernel: int = 4  # taps of the causal depthwise conv over q, k, v
    rope_fraction: float = 1.0  # the share of each attention head RoPE rotates (Qwen3.5: 0.25)

    # Derived sizes, so nobody recomputes them differently.
    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    @property
    def linear_k_heads(self) -> int:
        return self.linear_key_heads or self.n_heads

    @property
    def linear_v_heads(self) -> int:
        return self.linear_value_heads or self.linear_k_heads

    @property
    def linear_k_dim(self) -> int:
        return self.linear_key_dim or self.head_size

    @property
    def linear_v_dim(self) -> int:
        return self.linear_value_dim or self.linear_k_dim

    @property
    def rotary_dim(self) -> int:
        """The channels of each head RoPE rotates (the first ones; the rest pass)."""
        return int(self.head_size * self.rope_fraction)

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """Each layer's mixer: `layer_pattern` repeated over the layers (its length divides
        n_layers), or `mixer` for every layer without a pattern."""
        if self.mixer == "attention" or self.layer_pattern is None:
            return (self.mixer,) * self.n_layers
        pattern = self.layer_pattern
        return tuple(PATTERN_LETTERS[pattern[i % len(pattern)]] for i in range(self.n_layers))

    @property
    def mixer_params(self) -> dict[str, int]:
        """Parameters of one layer's mixer by kind (exact; the built modules' numel):
        attention's q (doubled with attn_gate), k, v, o and their biases and QK-norms; a
        DeltaNet's in_proj_qkv, z, b, a, the conv, A_log, dt_bias, the gated norm, out_proj."""
        d, H, K, E = self.d_model, self.n_heads, self.kv_heads, self.head_size
        gate = 2 if self.attn_gate else 1
        attn = d * H * E * gate + 2 * d * K * E + H * E * d
        if self.bias or self.qkv_bias:
            attn += H * E * gate + 2 * K * E
        if self.bias:
            attn += d
        if self.qk_norm:
            attn += 2 * NORM_SPECS[self.norm].params(E)
        nk, nv, dk, dv = self.linear_k_heads, self.linear_v_heads, self.linear_k_dim, self.linear_v_dim
        conv = 2 * nk * dk + nv * dv
        linear = (d * conv + d * nv * dv + 2 * d * nv + conv * self.linear_conv_kernel
                  + 2 * nv + dv + nv * dv * d)
        return {"attention": attn, "gated_deltanet": linear}

    @property
    def ffn_hidden(self) -> int:
        if self.d_ff is not None:
            return self.d_ff
        if self.ffn == "swiglu":  # 8d/3 keeps the parameter count of a 4d two-matrix FFN
            return 16 * math.ceil(8 * self.d_model / 3 / 16)
        return 4 * self.d_model

    @property
    def n_writes(self) -> int:
        """Writes into the residual stream: two sublayers per block."""
        return 2 * self.n_layers

    @property
    def approx_params(self) -> int:
        """Parameters counted from the shapes, for memory estimates and the size bound:
        exact (the built model's numel, tests/test_deltanet_stack.py) for every residual but
        ngpt, whose per-dimension scales it leaves out."""
        d, f = self.d_model, self.ffn_hidden
        per_kind = self.mixer_params
        mixers = sum(per_kind[kind] for kind in self.layer_kinds)
        n_mats = 3 if self.ffn == "swiglu" else 2
        ffn = n_mats * d * f + (((n_mats - 1) * f + d) if self.bias else 0)
        norm = NORM_SPECS[self.norm].params(d)
        norms = 2 * len(variants.NORM_SLOTS[self.placement]) * norm
        embed = self.vocab_size * d + (self.context_len * d if self.position == "learned" else 0)
        head = 0 if self.tie_embeddings else self.vocab_size * d
        residual = self.n_writes * residual_params_per_write(self.residual, d, self.streams)
        value_mix = 2 * (self.n_layers - 1) if self.value_residual else 0  # ResFormer's lambdas
        return (embed + mixers + self.n_layers * (ffn + norms) + residual + head
                + (norm if self.final_norm else 0) + value_mix + self.shortcut_params)

    @property
    def shortcut_params(self) -> int:
        """What the stream shortcuts learn (exact; depthlab.model.shortcuts builds them):
        two scalars per block for x0_mix, one for backout, a 24-wide gate and a scalar for
        smear, one weight per mirrored pair for unet_skips, and on every value-embedding
        layer a [V, K*E] table and a [K, 12] gate."""
        n = 2 * self.n_layers if self.x0_mix else 0
        n += 1 if self.backout else 0
        n += SMEAR_CHANNELS + 1 if self.smear else 0
        n += self.n_layers // 2 if self.unet_skips else 0
        if self.value_embeds:
            per_layer = self.kv_heads * (self.vocab_size * self.head_size
                                         + VALUE_EMBED_GATE_CHANNELS)
            n += len(value_embed_layers(self.n_layers)) * per_layer
        return n

    @property
    def on_sphere(self) -> bool:
        """The residual keeps states and weight rows on the unit sphere (nGPT: its spec's
        `sphere`), so the model adds the sphere's scales and renormalises after every step."""
        return _residual(self.residual).sphere

    @property
    def write_scale(self) -> float:
        """What each write is multiplied by as it enters the stream: 1/sqrt(2L) for
        `residual=scaled`, else 1 (the variants with learned scales start elsewhere);
        the residual spec's `write_scale`."""
        return _residual(self.residual).write_scale(self.n_writes)

    @property
    def out_proj_std(self) -> float:
        """Init std of the projections that write into the stream (o_proj, down_proj):
        init_std * init_gain / sqrt(2L) with `scaled_init` (GPT-2, Radford et al. 2019),
        so the sum of 2L writes keeps the scale of one; else init_std * init_gain.
        residual=deepnorm brings its own depth rule (beta, `Residual.init_scale`) instead."""
        std = self.init_std * self.init_gain
        depth_rule = self.scaled_init and not _residual(self.residual).own_depth_init
        return std / math.sqrt(self.n_writes) if depth_rule else std


@dataclass(frozen=True)
class DataConfig:
    corpus: str = "shakespeare"  # a registered corpus name or a path to .txt files
    tokenizer: str = "char"  # char | bpe
    bpe_vocab: int = 2048
    val_fraction: float = 0.1
    special_tokens: tuple[str, ...] = ()  # each one id, e.g. ("<|endoftext|>",)
    separate_documents: bool = False  # join a corpus's documents with <|endoftext|>
    # A folder from `depthlab data prepare`: when set, the run reads its token shards by
    # offset (depthlab.shards) and takes its tokenizer and validation part from the folder;
    # corpus, tokenizer, bpe_vocab, special_tokens, separate_documents and val_fraction
    # then play no part.
    shards: str = ""

    def __post_init__(self) -> None:  # a list given in code hashes and compares as a tuple
        object.__setattr__(self, "special_tokens", tuple(self.special_tokens))


@dataclass(frozen=True)
class TrainConfig:
    # Laptop defaults: the course model (d 128, char Shakespeare) trains at about 5,000 tokens
    # per CPU-second on one thread (bench/train_speed.py), so 600 steps of 16 x 128 tokens
    # take about 4 minutes of one core (README "Train").
    steps: int = 600
    batch_size: int = 16  # sequences per optimizer step (per micro-step), all ranks together
    seq_len: int = 128
    grad_accum: int = 1
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_tokens: int = 8192
    probe_every: int = 100
    ckpt_every: int = 100
    keep_ckpts: int = 2
    seed: int = 1337
    device: str = "auto"  # auto | cpu | cuda | mps
    dtype: str = "float32"  # float32 | bfloat16 (autocast)
    compile: bool = False
    threads: int = 0  # 0: choose automatically
    log_every: int = 10  # a `train` line in metrics.jsonl every N steps (and at the last)
    decay_embeddings: bool = False  # weight decay on token/position embeddings
    # muon: Muon (torch.optim.Muon) on the blocks' hidden matrices, AdamW on the rest
    # (depthlab.train.optim). Muon's peak lr and momentum are nanochat's (matrix_lr 0.02,
    # momentum 0.95); the schedule scales both peaks alike.
    optimizer: str = "adamw"
    muon_lr: float = 0.02
    muon_momentum: float = 0.95
    # Under torchrun (depthlab.train.parallel): ddp keeps a whole copy of the model and
    # optimizer in every process; fsdp shards them (FSDP2). One process ignores it.
    parallel: str = "ddp"
    activation_checkpointing: bool = False  # recompute each block in backward: less memory


def refuse_hf_config(raw: Any, where: str) -> None:
    """A Hugging Face config.json (model_type, architectures) given where a depthlab
    config or run is expected: say what it is and which command takes it."""
    if isinstance(raw, dict) and ("model_type" in raw or "architectures" in raw) and (
            set(raw) - set(_SECTION_TYPES)):
        raise ConfigError(f"{where}: a Hugging Face config.json, not a depthlab config or run; "
                          "`depthlab hf import FOLDER --out RUN` makes a run of its checkpoint, "
                          "`depthlab anatomy FILE` describes it")


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Config:
        if not isinstance(raw, dict):  # a run's {"config": ...} holding something else
            got = json.dumps(raw) if raw is None or isinstance(raw, (bool, int, float)) else (
                "an array" if isinstance(raw, list) else "a string")
            raise ConfigError(f"field config must be an object with sections model, data, "
                              f"train, got {got}")
        unknown = set(raw) - set(_SECTION_TYPES)
        if unknown:
            raise ConfigError(
                f"unknown config section {sorted(unknown)[0]!r}; allowed: model, data, train"
            )
        sections = {}
        for name, section_cls in _SECTION_TYPES.items():
            part = raw.get(name, {})
            if not isinstance(part, dict):
                raise ConfigError(f"config section {name!r} must be an object")
            sections[name] = _section_from_dict(section_cls, part, name)
        return validate(cls(**sections))

    @classmethod
    def load(cls, path: str | Path) -> Config:
        raw = read_json_object(path, "no such config file", ConfigError)
        # A run's config.json carries provenance next to the config itself.
        raw = raw.get("config", raw)
        refuse_hf_config(raw, str(path))
        return cls.from_dict(raw)


_SECTION_TYPES = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _section_from_dict(cls: type, raw: dict[str, Any], section: str) -> Any:
    hints = _field_types(cls)
    kwargs = {}
    for key, value in raw.items():
        if key not in hints:
            raise ConfigError(_unknown_key_message(f"{section}.{key}"))
        kwargs[key] = _coerce(value, hints[key], f"{section}.{key}", strict=True)
    return cls(**kwargs)


def _coerce(value: Any, hint: Any, name: str, strict: bool = False) -> Any:
    """Check a JSON or CLI value against a field's type (int, float, bool, str, X | None).

    strict (config files): JSON types as they are, so "0.1" is not a number, "yes" not a
    boolean and true not an integer; otherwise (--set) the text is parsed."""
    args = typing.get_args(hint)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    if strict and isinstance(value, str) and base is not str:
        kind = {bool: "true or false", int: "an integer", float: "a number"}.get(base, "")
        null = " or null" if optional else ""
        raise ConfigError(f"{name} must be {kind}{null} (a JSON {_json_kind(base)}, not a "
                          f"string), got {value!r}")
    is_null_text = isinstance(value, str) and value.lower() in ("none", "null")
    if value is None or (is_null_text and optional):
        if optional:
            return None
        raise ConfigError(f"{name} cannot be null; expected {base.__name__}")
    if typing.get_origin(hint) is tuple:
        if strict and isinstance(value, str):
            raise ConfigError(f'{name} must be a JSON list of strings, e.g. ["<|endoftext|>"], '
                              f"not a string, got {value!r}")
        return _coerce_strings(value, name)
    if isinstance(value, str) and base is not str:
        value = _parse_text(value, base, name)
    if base is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    if base is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be an integer, got {value!r}")
        if abs(value) > MAX_INT:
            shown = value if value.bit_length() < 64 else f"about 2^{value.bit_length() - 1}"
            raise ConfigError(f"{name} must be at most {MAX_INT:,} in size, got {shown}")
        return value
    if base is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{name} must be finite, got {value!r}")
        return float(value)
    if base is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string, got {value!r}")
        return value
    raise ConfigError(f"{name}: unsupported type {hint}")  # pragma: no cover


def _coerce_strings(value: Any, name: str) -> tuple[str, ...]:
    """A list of strings: a JSON list, or on the command line its JSON text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f'{name} must be a list of strings, e.g. ["<|endoftext|>"], '
                          f"got {value!r}")
    return tuple(value)


def _json_kind(base: type) -> str:
    return "boolean" if base is bool else "number"


def _parse_text(text: str, base: type, name: str) -> Any:
    if base is bool:
        lowered = text.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ConfigError(f"{name} must be true or false, got {text!r}")
    try:
        return base(text)
    except ValueError:
        kind = "an integer" if base is int else "a number"
        raise ConfigError(f"{name} must be {kind}, got {text!r}") from None


def valid_keys() -> list[str]:
    return [
        f"{section}.{f.name}" for section, cls in _SECTION_TYPES.items() for f in fields(cls)
    ]


def _unknown_key_message(key: str) -> str:
    keys = valid_keys()
    close = difflib.get_close_matches(key, keys, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return f"unknown config key {key!r}; {hint}valid keys: {', '.join(keys)}"


def apply_overrides(cfg: Config, assignments: list[str]) -> Config:
    """Apply `section.field=value` overrides (the CLI's repeated --set) and validate."""
    for item in assignments:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. model.n_layers=12")
        section, _, name = key.partition(".")
        cls = _SECTION_TYPES.get(section)
        hints = _field_types(cls) if cls else {}
        if name not in hints:
            raise ConfigError(_unknown_key_message(key))
        value = _coerce(text.strip(), hints[name], key)
        part = replace(getattr(cfg, section), **{name: value})
        cfg = replace(cfg, **{section: part})
    return validate(cfg)


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} is not allowed; choose one of: {', '.join(allowed)}")


def _positive(name: str, value: float | int) -> None:
    if value <= 0:
        raise ConfigError(f"{name} must be > 0, got {value}")


def validate_model(m: ModelConfig) -> ModelConfig:
    _one_of("model.norm", m.norm, NORMS)
    _one_of("model.placement", m.placement, PLACEMENTS)
    _one_of("model.residual", m.residual, RESIDUALS)
    _one_of("model.norm_scale", m.norm_scale, NORM_SCALES)
    _one_of("model.ffn", m.ffn, FFNS)
    _one_of("model.position", m.position, POSITIONS)
    for name in ("vocab_size", "context_len", "d_model", "n_heads"):
        _positive(f"model.{name}", getattr(m, name))
    if not 1 <= m.streams <= MAX_STREAMS:
        raise ConfigError(f"model.streams must be between 1 and {MAX_STREAMS}, got {m.streams}")
    if m.streams > 1 and not _residual(m.residual).widens_copies:
        wide = keys_where(lambda s: s.widens_copies)
        raise ConfigError(f"model.streams={m.streams} needs model.residual={' or '.join(wide)} "
                          f"(n copies of the stream); got model.residual={m.residual!r}")
    for name in ("norm_eps", "rope_theta", "init_std", "init_gain"):
        _positive(f"model.{name}", getattr(m, name))
    if not 1 <= m.n_layers <= MAX_LAYERS:
        raise ConfigError(f"model.n_layers must be between 1 and {MAX_LAYERS}, got {m.n_layers}")
    if m.head_dim is None and m.d_model % m.n_heads:
        raise ConfigError(
            f"model.d_model={m.d_model} is not divisible by model.n_heads={m.n_heads}; "
            "choose n_heads that divides d_model or set model.head_dim"
        )
    if m.head_dim is not None:
        _positive("model.head_dim", m.head_dim)
    if m.n_kv_heads is not None:
        _positive("model.n_kv_heads", m.n_kv_heads)
        if m.n_heads % m.n_kv_heads:
            raise ConfigError(
                f"model.n_heads={m.n_heads} is not a multiple of model.n_kv_heads={m.n_kv_heads}"
            )
    if m.position == "rope" and m.head_size % 2:
        raise ConfigError(f"RoPE needs an even head size; got {m.head_size}")
    if m.d_ff is not None:
        _positive("model.d_ff", m.d_ff)
    if m.ffn_clamp is not None:
        if m.ffn != "swiglu":
            raise ConfigError("model.ffn_clamp applies to ffn=swiglu only")
        _positive("model.ffn_clamp", m.ffn_clamp)
    _check_mixer(m)  # before the size: the parameter count reads the layer pattern

    if m.approx_params > MAX_PARAMS:
        raise ConfigError(f"this model has about {m.approx_params:.3g} parameters, more than "
                          f"the limit of {MAX_PARAMS:.3g}; shrink model.d_model, d_ff or vocab_size")
    _check_residual_spec(m)
    if m.norm == "none":
        if m.placement != "pre":
            raise ConfigError(
                f"model.placement={m.placement!r} needs a norm but model.norm='none'; "
                f"choose model.norm from: {', '.join(NORMS[1:])}"
            )
        for switch in ("final_norm", "qk_norm"):
            if getattr(m, switch):
                raise ConfigError(
                    f"model.{switch}=true needs a norm but model.norm='none'; "
                    f"set model.{switch}=false or choose model.norm from: {', '.join(NORMS[1:])}"
                )
    _check_frontier(m)
    _check_residual_ffn(m)
    _check_shortcuts(m)
    return m


def _check_residual_ffn(m: ModelConfig) -> None:
    """The FFNs a residual's spec allows (nGPT scales SwiGLU's two inputs: depthlab.model.ngpt)."""
    spec = RESIDUAL_SPECS[m.residual]
    if spec.ffns and m.ffn not in spec.ffns:
        raise ConfigError(f"model.residual={m.residual!r} {spec.ffn_why}; "
                          f"set model.ffn={' or '.join(spec.ffns)}, got {m.ffn!r}")


def _check_pattern(m: ModelConfig) -> None:
    """model.layer_pattern: letters A and L only, repeated a whole number of times."""
    pattern, letters = m.layer_pattern, "/".join(PATTERN_LETTERS)
    allowed = ", ".join(f"{k} ({v})" for k, v in PATTERN_LETTERS.items())
    if m.mixer != "gated_deltanet":
        raise ConfigError(f"model.layer_pattern={pattern!r} mixes attention and Gated DeltaNet "
                          f"layers: it needs model.mixer=gated_deltanet, got {m.mixer!r}")
    if not pattern:
        raise ConfigError(f"model.layer_pattern is empty; give one letter per layer, {allowed}, "
                          "e.g. LLLA, or null for every layer model.mixer")
    wrong = next((c for c in pattern if c not in PATTERN_LETTERS), None)
    if wrong is not None:
        raise ConfigError(f"model.layer_pattern={pattern!r} has the letter {wrong!r}; allowed: "
                          f"{allowed}")
    if len(pattern) > m.n_layers:
        raise ConfigError(f"model.layer_pattern={pattern!r} has {len(pattern)} letters, more than "
                          f"model.n_layers={m.n_layers}")
    if m.n_layers % len(pattern):
        raise ConfigError(f"model.layer_pattern={pattern!r} ({len(pattern)} {letters} letters) "
                          f"repeats over the layers: its length must divide "
                          f"model.n_layers={m.n_layers}")


# What a Gated DeltaNet layer cannot be combined with, and why (checked when any layer is
# one): two switches, and residual designs by what their spec says they do.
DELTANET_REFUSES = {
    "value_residual": "mixes layer 0's attention values into later layers' values; a DeltaNet "
                      "layer writes its values into a state, not an attention",
    "value_embeds": "adds a value embedding to attention's V",
}
DELTANET_REFUSES_RESIDUAL = (
    (lambda s: s.sphere, "puts attention's q and k on the sphere and every weight row of d_model "
                         "on it after each step; the DeltaNet's conv and decay are no such rows"),
    (lambda s: s.own_depth_init, "scales v_proj and o_proj by its own depth rule; a DeltaNet "
                                 "layer has neither"),
)


def _check_mixer(m: ModelConfig) -> None:
    """The mixer fields (depthlab.model.deltanet) and what a DeltaNet layer composes with."""
    _one_of("model.mixer", m.mixer, MIXERS)
    if m.layer_pattern is not None:
        _check_pattern(m)
    for name in ("linear_key_heads", "linear_value_heads", "linear_key_dim", "linear_value_dim"):
        if getattr(m, name) is not None:
            _positive(f"model.{name}", getattr(m, name))
    if m.linear_v_heads % m.linear_k_heads:
        raise ConfigError(f"model.linear_value_heads={m.linear_v_heads} is not a multiple of "
                          f"model.linear_key_heads={m.linear_k_heads} (each key head serves "
                          "a whole number of value heads)")
    if not 1 <= m.linear_conv_kernel <= MAX_CONV_KERNEL:
        raise ConfigError(f"model.linear_conv_kernel must be between 1 and {MAX_CONV_KERNEL} "
                          f"(taps of the causal conv; Qwen3.5: 4), got {m.linear_conv_kernel}")
    _in_range("model.rope_fraction", m.rope_fraction, 0, 1, "(]",
              "the share of each head RoPE rotates; Qwen3.5: 0.25")
    if m.position == "rope" and (m.rotary_dim < 2 or m.rotary_dim % 2):
        raise ConfigError(f"model.rope_fraction={m.rope_fraction:g} rotates {m.rotary_dim} of "
                          f"{m.head_size} channels; RoPE needs an even number, at least 2")
    if m.position != "rope" and m.rope_fraction != 1.0:
        raise ConfigError(f"model.rope_fraction={m.rope_fraction:g} needs model.position=rope, "
                          f"got {m.position!r}")
    if "gated_deltanet" not in m.layer_kinds:
        return
    refused = [(f"model.{key}=true", why) for key, why in DELTANET_REFUSES.items() if getattr(m, key)]
    refused += [(f"model.residual={m.residual!r}", why) for applies, why in DELTANET_REFUSES_RESIDUAL
                if applies(RESIDUAL_SPECS[m.residual])]
    if refused:
        shown, why = refused[0]
        raise ConfigError(f"{shown} does not compose with Gated DeltaNet layers (model.mixer="
                          f"gated_deltanet): it {why}")


def _check_shortcuts(m: ModelConfig) -> None:
    """The stream shortcuts (depthlab.model.shortcuts): what each needs of the model."""
    if m.logit_softcap is not None:
        _positive("model.logit_softcap", m.logit_softcap)
    if m.backout and m.n_layers < 3:
        raise ConfigError(f"model.backout=true subtracts the stream after block L//2, which must "
                          f"not be the last block: it needs model.n_layers >= 3, got {m.n_layers}")
    if m.unet_skips and m.n_layers < 2:
        raise ConfigError(f"model.unet_skips=true adds block j's output to block L-1-j's input: "
                          f"it needs model.n_layers >= 2, got {m.n_layers}")
    wide = _residual(m.residual).widens
    for switch in (k for k, spec in SHORTCUT_SPECS.items() if spec.one_stream):
        if getattr(m, switch) and wide:
            raise ConfigError(f"model.{switch}=true mixes one [B, T, D] stream; "
                              f"model.residual={m.residual!r} carries a wider one, "
                              f"choose a single-stream residual")
    if m.on_sphere:
        for switch in ("x0_mix", "backout", "unet_skips", "smear"):
            if getattr(m, switch):
                raise ConfigError(f"model.{switch}=true adds vectors off the unit sphere to "
                                  f"model.residual={m.residual!r}'s stream, which every update keeps on "
                                  f"it; set model.{switch}=false or choose another residual")
    if m.smear and m.d_model < SMEAR_CHANNELS:
        raise ConfigError(f"model.smear=true gates on the first {SMEAR_CHANNELS} channels of the "
                          f"embedding: it needs model.d_model >= {SMEAR_CHANNELS}, got {m.d_model}")
    if m.value_embeds and m.d_model < VALUE_EMBED_GATE_CHANNELS:
        raise ConfigError(f"model.value_embeds=true gates on the first {VALUE_EMBED_GATE_CHANNELS} "
                          f"channels of the attention input: it needs model.d_model >= "
                          f"{VALUE_EMBED_GATE_CHANNELS}, got {m.d_model}")


def _check_residual_spec(m: ModelConfig) -> None:
    """The placements and norms a residual's spec allows (their papers' setting); before
    the norm checks, so a residual that allows only norm=none says so first."""
    spec = RESIDUAL_SPECS[m.residual]
    if spec.placements and m.placement not in spec.placements:
        raise ConfigError(f"model.residual={m.residual!r} is {spec.placement_why}; "
                          f"model.placement={m.placement!r} is not allowed, "
                          f"set model.placement={' or '.join(spec.placements)}")
    if spec.norms and m.norm not in spec.norms:
        raise ConfigError(f"model.residual={m.residual!r} {spec.norm_why}; model.norm={m.norm!r} "
                          f"is not allowed, set model.norm={' or '.join(spec.norms)}"
                          + (" and model.final_norm=false" if "none" in spec.norms else ""))


def _check_frontier(m: ModelConfig) -> None:
    """Combinations the residual-frontier switches cannot make (their papers' setting)."""
    if m.norm_scale == "depth" and (m.norm == "none" or m.placement not in ("pre", "sandwich")):
        raise ConfigError(f"model.norm_scale='depth' scales the pre-norms inside each block; it needs "
                          f"model.placement pre or sandwich and a model.norm, got "
                          f"placement={m.placement!r}, norm={m.norm!r}")


def _in_range(name: str, value: float, low: float, high: float, closed: str, why: str) -> None:
    """value within low..high; `closed` says which ends are allowed: "[]", "[)", "(]", "()"."""
    above = value >= low if closed[0] == "[" else value > low
    below = value <= high if closed[1] == "]" else value < high
    if not (above and below):
        raise ConfigError(f"{name} must be in {closed[0]}{low:g}, {high:g}{closed[1]} ({why}), "
                          f"got {value:g}")


def _check_optimizer(t: TrainConfig) -> None:
    """AdamW's, Muon's and the schedule's fields, each in the range where it means what it says."""
    _in_range("train.lr", t.lr, 0, MAX_LR, "(]", "typical: 1e-4 .. 1e-2")
    _in_range("train.beta1", t.beta1, 0, 1, "[)", "AdamW's momentum; typical 0.9")
    _in_range("train.beta2", t.beta2, 0, 1, "()", "AdamW's second-moment decay; typical 0.95")
    _in_range("train.min_lr_ratio", t.min_lr_ratio, 0, 1, "[]",
              "the schedule decays from lr to min_lr_ratio * lr")
    _one_of("train.optimizer", t.optimizer, OPTIMIZERS)
    _in_range("train.muon_lr", t.muon_lr, 0, MAX_LR, "(]", "Muon's peak lr; typical 0.02")
    _in_range("train.muon_momentum", t.muon_momentum, 0, 1, "[)",
              "Muon's momentum; typical 0.95")
    if t.lr * t.weight_decay >= 1:  # AdamW multiplies each decayed weight by 1 - lr * wd
        raise ConfigError(f"train.weight_decay must be below 1 / train.lr = {1 / t.lr:g} (each "
                          f"step multiplies the weights by 1 - lr * weight_decay), got "
                          f"{t.weight_decay:g}")


def validate(cfg: Config) -> Config:
    validate_model(cfg.model)
    d, t = cfg.data, cfg.train
    _one_of("data.tokenizer", d.tokenizer, ("char", "bpe"))
    if d.shards and not d.shards.strip():
        raise ConfigError(f"data.shards must name a folder of token shards (from `depthlab "
                          f"data prepare`) or be empty, got {d.shards!r}")
    if not 256 <= d.bpe_vocab <= 65536:
        raise ConfigError(f"data.bpe_vocab must be between 256 and 65536, got {d.bpe_vocab}")
    if not 0.0 < d.val_fraction < 0.5:
        raise ConfigError(f"data.val_fraction must be in (0, 0.5), got {d.val_fraction}")
    if "" in d.special_tokens or len(set(d.special_tokens)) != len(d.special_tokens):
        raise ConfigError(f"data.special_tokens must be distinct non-empty strings, got "
                          f"{list(d.special_tokens)!r}")
    for name in ("steps", "batch_size", "seq_len", "grad_accum", "eval_every", "eval_tokens",
                 "probe_every", "ckpt_every", "keep_ckpts", "lr", "log_every"):
        _positive(f"train.{name}", getattr(t, name))
    for name in ("warmup_steps", "weight_decay", "grad_clip", "threads", "seed"):
        if getattr(t, name) < 0:
            raise ConfigError(f"train.{name} must be >= 0, got {getattr(t, name)}")
    if t.grad_accum > MAX_GRAD_ACCUM:
        raise ConfigError(f"train.grad_accum must be at most {MAX_GRAD_ACCUM}, got {t.grad_accum} "
                          "(Ctrl-C and SIGTERM are honoured between steps, so a step must not "
                          "take hours)")
    _check_optimizer(t)
    if t.seq_len > cfg.model.context_len:
        raise ConfigError(
            f"train.seq_len={t.seq_len} exceeds model.context_len={cfg.model.context_len}"
        )
    _one_of("train.device", t.device, ("auto", "cpu", "cuda", "mps"))
    _one_of("train.dtype", t.dtype, ("float32", "bfloat16"))
    _one_of("train.parallel", t.parallel, ("ddp", "fsdp"))
    return cfg


def diff(a: Config, b: Config) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ between two configs: what an experiment changes."""
    flat_a, flat_b = flatten(a), flatten(b)
    return {k: (flat_a[k], flat_b[k]) for k in flat_a if flat_a[k] != flat_b[k]}


def flatten(cfg: Config) -> dict[str, Any]:
    return {
        f"{section}.{key}": value
        for section, part in cfg.to_dict().items()
        for key, value in part.items()
    }

