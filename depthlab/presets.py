"""Named presets: the generations of the lesson's evolution table, at course scale.

Each preset is a function that derives from another one, so the difference
between two generations is the handful of switches it changes. All presets keep
the course model's size (4 layers, d_model 128) so that they train on a laptop
CPU and compare at equal width; scale them with `--set model.d_model=...`.
Real, full-size models live in `depthlab/data/configs/` (Hugging Face
`config.json` files) for the anatomy tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from depthlab.config import Config, ModelConfig, validate
from depthlab.errors import ConfigError


def course() -> Config:
    """The course's own model: 4 layers, Pre-RMSNorm, SwiGLU, RoPE, final norm,
    output projections initialised 0.02/sqrt(2L) (0.00707 at 4 layers)."""
    return Config(model=ModelConfig())


def llama() -> Config:
    """Llama (Touvron et al. 2023): Pre-RMSNorm, SwiGLU 8d/3, no bias, untied head,
    plain 0.02 init everywhere."""
    c = course()
    return replace(c, model=replace(c.model, tie_embeddings=False, scaled_init=False))


def qwen3() -> Config:
    """Qwen3 (2025): Llama plus QK-norm and grouped-query attention (2 query heads per K/V head)."""
    c = llama()
    return replace(c, model=replace(c.model, qk_norm=True, n_kv_heads=c.model.n_heads // 2,
                                    rope_theta=1_000_000.0, tie_embeddings=True))


def qwen_next() -> Config:
    """Qwen3-Next (2025): zero-centred RMSNorm (1 + w, w starts at 0, eps 1e-6) and a
    sigmoid gate on the attention output (Qiu et al. 2025)."""
    c = qwen3()
    return replace(c, model=replace(c.model, norm="rmsnorm_zero_centered", norm_eps=1e-6,
                                    attn_gate=True))


def qwen3_5() -> Config:
    """Qwen3.5 (2026): Qwen3-Next's block with 3 of every 4 token mixers a Gated DeltaNet
    (model.layer_pattern LLLA), gated attention with QK-norm and partial RoPE on the 4th."""
    c = qwen_next()
    return replace(c, model=replace(c.model, mixer="gated_deltanet", layer_pattern="LLLA",
                                    rope_fraction=0.25, linear_value_heads=2 * c.model.n_heads))


def olmo2() -> Config:
    """OLMo 2 (2024): the norm moves to the sublayer output, x + Norm(F(x)), plus QK-norm."""
    c = llama()
    return replace(c, model=replace(c.model, placement="output", qk_norm=True))


def gpt2() -> Config:
    """GPT-2 (Radford et al. 2019): Pre-LayerNorm + final LayerNorm, GELU FFN with d_ff = 4d,
    learned positions, biases, tied head, output projections 0.02/sqrt(2L)."""
    c = course()
    return replace(c, model=replace(c.model, norm="layernorm", ffn="gelu", position="learned",
                                    bias=True, tie_embeddings=True, scaled_init=True))


def vaswani2017() -> Config:
    """The original Transformer (Vaswani et al. 2017) as a decoder-only stack: LayerNorm
    after the add (Post-LN), ReLU FFN with d_ff = 4d, no final norm, plain 0.02 init.
    (The original used sinusoidal positions; learned ones stand in for them.)"""
    c = gpt2()
    return replace(c, model=replace(c.model, placement="post", ffn="relu", final_norm=False,
                                    scaled_init=False))


def speedrun() -> Config:
    """The fastest design of the standard speedrun race: course + Muon, 1,000 steps.

    Trained as the race trains its arms (16 x 64 characters a step, evaluated every 50
    steps on the same 256 validation windows), so `depthlab train --preset speedrun`
    reaches nanoGPT's CPU-recipe loss in the time docs/results.md#speedrun reports;
    tests/test_speedrun_preset.py holds it to the committed race's fastest arm."""
    c = course()
    return replace(c, train=replace(
        c.train, optimizer="muon", steps=1000, batch_size=16, seq_len=64, eval_every=50,
        eval_tokens=16384, probe_every=50, ckpt_every=250))


def tiny() -> Config:
    """A seconds-fast variant of the course model for tests and smoke runs."""
    c = course()
    return replace(
        c,
        model=replace(c.model, n_layers=2, d_model=32, n_heads=2, context_len=64),
        train=replace(c.train, steps=30, batch_size=8, seq_len=32, eval_every=10,
                      eval_tokens=1024, probe_every=10, ckpt_every=10, warmup_steps=5),
    )


PRESETS: dict[str, Callable[[], Config]] = {
    "course": course,
    "vaswani2017": vaswani2017,
    "gpt2": gpt2,
    "llama": llama,
    "qwen3": qwen3,
    "qwen_next": qwen_next,
    "qwen3_5": qwen3_5,
    "olmo2": olmo2,
    "speedrun": speedrun,
    "tiny": tiny,
}


def get_preset(name: str) -> Config:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return validate(PRESETS[name]())


def describe_presets() -> list[tuple[str, str]]:
    """(name, first docstring line) for --help and --list."""
    return [(n, (f.__doc__ or "").strip().splitlines()[0]) for n, f in PRESETS.items()]
