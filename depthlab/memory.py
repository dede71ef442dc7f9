"""Will it fit? A size estimate made before anything is allocated.

A config with `model.vocab_size=1000000000` or `train.batch_size=1000000000` is
valid field by field but cannot run; allocating it first ends in a MemoryError
traceback (or the machine swapping). `check_fits` counts what the job holds at
once and refuses with the estimate and the limit instead:

    weights               4 bytes per parameter (float32)
    gradients + AdamW     12 bytes per parameter more when training
    activations           what autograd keeps for backward, per micro-batch:
                          per block ~(18 d + 5 d_ff) floats per token plus the
                          attention scores (3 x heads x seq x seq per sequence)
                          or a Gated DeltaNet layer's chunks (`mixer_floats`),
                          and 4 copies of the logits (tokens x vocab);
                          the residual's own state where it is wider than
                          one stream (`residual_floats`, from the
                          residual's spec in depthlab.variants), and
                          what the stream shortcuts keep (`shortcut_floats`)
    RoPE's tables         cos and sin for every position up to context_len,
                          built through float64 (`rope_floats`)
    inference             one block's activations, the logits, and the KV
                          cache (and DeltaNet states), for the tokens the job
                          actually runs

Under torchrun each process holds its share (`per_rank`): ddp a whole copy of the
weights, gradients and AdamW moments plus DDP's gradient buckets (one more copy of the
gradients), for batch_size / world sequences; fsdp 1/world of the weights, gradients
and moments, plus what it gathers whole while computing: the root's weights (the
embeddings and the head, kept from forward to backward) and two blocks' (the one
running and the one fetched ahead), and one block's whole gradient before it is
reduce-scattered. All counted in float32, an upper bound for bfloat16 compute.

The coefficients are calibrated on the measured peak RSS of two training steps of
the course, llama and gpt2 presets (the estimate is 0.8-0.9 of it; the test in
tests/test_reliability.py measures it again). A refusal needs no more: the sizes it
stops are orders of magnitude too big.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from depthlab.config import DELTANET_CHUNK as CHUNK
from depthlab.config import Config, ModelConfig, value_embed_layers
from depthlab.errors import UserError
from depthlab.variants import RESIDUAL_SPECS

FLOAT = 4  # bytes


@dataclass(frozen=True)
class MemoryEstimate:
    params: int
    weights: int  # bytes
    optimizer: int  # gradients and AdamW moments, bytes
    activations: int  # bytes

    @property
    def total(self) -> int:
        return self.weights + self.optimizer + self.activations


def residual_floats(m: ModelConfig) -> int:
    """Floats per token that a wide residual keeps for backward over all its writes, beyond
    one stream's: its spec's `wide_floats` (depthlab.variants, which says how each was
    fitted to the measured peak of a training step)."""
    return RESIDUAL_SPECS[m.residual].wide_floats(m.d_model, m.streams, m.n_writes)


def shortcut_floats(m: ModelConfig) -> int:
    """Floats per token the stream shortcuts (depthlab.model.shortcuts) keep for backward,
    counted from the tensors autograd saves (not fitted like the rest: they are small next
    to a block): x0_mix the mixed input and x0 per block, a U-net skip its sum, a value
    embedding its looked-up values, their gated product and the gate, smear and backout a
    few streams once, the logit softcap two more copies of the logits."""
    d, kv = m.d_model, m.kv_heads * m.head_size
    n = (2 * d * m.n_layers if m.x0_mix else 0) + (d * (m.n_layers // 2) if m.unet_skips else 0)
    if m.value_embeds:
        n += len(value_embed_layers(m.n_layers)) * (3 * kv + m.kv_heads)
    n += (3 * d if m.smear else 0) + (d if m.backout else 0)
    return n + (2 * m.vocab_size if m.logit_softcap is not None else 0)


def rope_floats(m: ModelConfig) -> int:
    """Floats at the peak of building RoPE's cos, sin tables (depthlab.model.attention.
    rope_cos_sin), which the model makes for max(tokens, context_len) positions: angles,
    their doubled copy, cos and sin in float64 beside the float32 results, about 8 floats
    per position and head dimension; 2 of them are kept."""
    return 8 * m.context_len * m.rotary_dim if m.position == "rope" else 0


def mixer_floats(m: ModelConfig, kind: str, batch: int, seq: int) -> int:
    """Floats one layer's token mixer keeps for backward, beyond the block's per-token
    share: attention its scores, softmax and mask (3 x heads x seq x seq a sequence); a
    Gated DeltaNet layer (depthlab.model.deltanet), counted from the tensors its chunked
    form saves, q, k, v before and after the conv and normalisation, z and the gated
    norm (~8 floats per channel of q, k, v), four C x C matrices per value head and chunk
    (decays, the UT system, its solution's inputs, the scores) and one Dk x Dv state per
    value head and chunk: linear in seq, where attention is quadratic."""
    if kind == "attention":
        return 3 * batch * m.n_heads * seq * seq
    channels = 2 * m.linear_k_heads * m.linear_k_dim + m.linear_v_heads * m.linear_v_dim
    chunks = -(-seq // CHUNK)
    per_chunk = m.linear_v_heads * (4 * CHUNK * CHUNK + m.linear_k_dim * m.linear_v_dim)
    return batch * (seq * 8 * channels + chunks * per_chunk)


def decode_state_floats(m: ModelConfig, tokens: int) -> int:
    """The decode cache for `tokens` tokens: keys and values of every attention layer, a
    fixed-size conv and delta-rule state of every Gated DeltaNet layer."""
    kinds = m.layer_kinds
    kv = 2 * kinds.count("attention") * tokens * m.kv_heads * m.head_size
    channels = 2 * m.linear_k_heads * m.linear_k_dim + m.linear_v_heads * m.linear_v_dim
    state = channels * (m.linear_conv_kernel - 1) + m.linear_v_heads * m.linear_k_dim * m.linear_v_dim
    return kv + kinds.count("gated_deltanet") * state


def estimate(m: ModelConfig, batch: int, seq: int, training: bool,
             checkpointed: bool = False) -> MemoryEstimate:
    """Bytes held at once by a forward (and, when training, backward) pass of `batch`
    sequences of `seq` tokens. `checkpointed` (train.activation_checkpointing): each
    block keeps only its input stream for backward, and one block at a time holds its
    activations again while it is recomputed."""
    n = m.approx_params
    tokens = batch * seq
    per_token = tokens * (18 * m.d_model + 5 * m.ffn_hidden)
    mixers = [mixer_floats(m, kind, batch, seq) for kind in m.layer_kinds]
    acts = (m.n_layers * per_token + sum(mixers) + 4 * tokens * m.vocab_size
            + tokens * (residual_floats(m) + shortcut_floats(m)))
    if training and checkpointed:
        acts = (m.n_layers * tokens * m.d_model * max(1, m.streams) + per_token + max(mixers)
                + 4 * tokens * m.vocab_size + tokens * (residual_floats(m) + shortcut_floats(m)))
    if not training:  # no graph is kept: one block's worth, the logits, the decode cache
        acts = per_token + max(mixers) + 2 * tokens * m.vocab_size + decode_state_floats(m, tokens)
    acts += rope_floats(m)
    return MemoryEstimate(n, FLOAT * n, 3 * FLOAT * n if training else 0, FLOAT * acts)


def root_params(m: ModelConfig) -> int:
    """The parameters outside the blocks: the embeddings, the head, the final norm (the
    root's FSDP group); the stream shortcuts' few scalars are left out."""
    embed = m.vocab_size * m.d_model + (m.context_len * m.d_model if m.position == "learned" else 0)
    return embed + (0 if m.tie_embeddings else m.vocab_size * m.d_model) + m.d_model


def per_rank(m: ModelConfig, batch: int, seq: int, world: int = 1,
             parallel: str = "ddp", checkpointed: bool = False) -> MemoryEstimate:
    """What one of `world` training processes holds at once, each running `batch`
    sequences of `seq` tokens per micro-step (the module docstring says what each kind
    keeps)."""
    est = estimate(m, batch, seq, training=True, checkpointed=checkpointed)
    n = est.params
    if world == 1:
        return est
    if parallel == "ddp":
        return MemoryEstimate(n, est.weights, est.optimizer + FLOAT * n, est.activations)
    root = root_params(m)
    block = max(0, n - root) // max(1, m.n_layers)
    return MemoryEstimate(n, FLOAT * (-(-n // world) + root + 2 * block),
                          3 * FLOAT * -(-n // world) + FLOAT * block, est.activations)


def available_bytes(device: str = "cpu") -> int:
    """Free memory where the job runs: the GPU's free memory for cuda, otherwise the
    kernel's MemAvailable (physical memory when /proc is missing)."""
    if str(device).startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1024 or unit == "PB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError  # pragma: no cover


def check_fits(cfg: Config, device: str = "cpu", *, training: bool = True,
               batch: int | None = None, seq: int | None = None,
               what: str = "this config", world: int = 1) -> MemoryEstimate:
    """Raise a one-line UserError when the job would not fit in the free memory. `seq`:
    the tokens of one sequence; by default train.seq_len when training, and 1 for
    inference, which checks the weights and tables a loaded model holds (a command that
    then runs a prompt checks again with its length: a model with a 32k context need not
    fit 32k tokens of activations to read five)."""
    t = cfg.train
    if batch is None:
        batch = max(1, t.batch_size // world) if training else 1
    if seq is None:
        seq = t.seq_len if training else 1
    est = (per_rank(cfg.model, batch, seq, world, t.parallel, t.activation_checkpointing)
           if training
           else estimate(cfg.model, batch, seq, training))
    limit = available_bytes(device)
    if est.total > limit:
        job = f"training ({batch} x {seq} tokens per micro-step)" if training else "inference"
        raise UserError(
            f"{what}: {job} needs about {human(est.total)} ({est.params:,} parameters: "
            f"{human(est.weights)} weights, {human(est.optimizer)} gradients and optimizer "
            f"state, {human(est.activations)} activations) but {human(limit)} is free; "
            "shrink model.vocab_size/d_model/n_layers or train.batch_size/seq_len")
    return est
