"""One generated token through the model in as few PyTorch calls as its arithmetic needs.

A cached decode step is bound by the number of PyTorch calls at d 128 (a one-token
matmul costs about what an addition does: a few microseconds of dispatch) and by reading
every weight once from memory at d 256 and up, not by its FLOPs. `DecodeStep` computes
what `Transformer` computes for one new token after a KVCache, from the same weights,
in about as many ATen calls as the readable forward (~36 per layer) but cheap ones and
no nn.Module call: there `F.rms_norm` of one row is ten kernels on CPU, `F.linear` a
transpose and a matmul, reshapes and transposes move heads around, and every module
call adds its own overhead. What changes, every change exact up to float rounding:

- q, k, v (and the output gate) are one matmul against their weights stacked, SwiGLU's
  gate and up another, copied once per `generate` call; each weight is stored the way
  MKL's one-row matmul reads fastest from memory (`_in_out`);
- RoPE's `rotate_half` is a signed permutation of each head's channels, so it is one
  matmul of the q and k rows together against that permutation (exact: one +-1 per
  column), then one multiply and one multiply-add with the position's cos, sin row;
- grouped-query attention is one SDPA call in which the G query heads sharing a K/V head
  are G queries of that head: no repeat of the cache;
- RMSNorm is its formula in six small calls; `F.layer_norm` is one kernel and is kept;
- the new keys and values are written into the cache in place (`index_copy_`) and read
  back as views; positions and cos, sin rows are slices of tables made once.

On the loaded 2-core machine of the README's figures a step of the course model fell
from about 1.2 ms to 0.5 ms, of the d 256 x 8-layer one from 6 ms to 3 ms (of which
1.5 ms is reading the weights: the matmuls alone, in a loop, take that long).

The readable `Block` / `Attention` forward stays the reference and the one that runs
whenever a hook is attached (it is what probes see); `generate` checks that before
every step. Which models the step runs is decided from the config, fail-safe
(`IMPLEMENTS`), and `generate` computes the step's first token both ways and keeps the
readable path when they differ, so a change to the readable forward that the step does
not know (a new gate on the stream, say) costs speed, never a different token.
tests/test_decode.py checks the two agree for every switch of the model.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.config import ModelConfig
from depthlab.hooks import _global_hooks_set
from depthlab.model.attention import Attention, KVCache, rotate_half
from depthlab.model.ffn import MLP, SwiGLU
from depthlab.model.norms import DyT, LayerNorm, RMSNorm, ZeroCenteredRMSNorm
from depthlab.model.support import ANY, config_reason
from depthlab.model.transformer import Block, Transformer

Norm = Callable[[torch.Tensor], torch.Tensor]

# A DecodeStep holds a copy of the stacked and the wide matrices of the model (at most
# all of them) while a `generate` call runs; where all of them would take more than
# this, the readable path runs instead, so a large model never needs twice its memory.
WEIGHT_COPY_LIMIT = 1 << 30  # bytes


def _rms_norm(weight: torch.Tensor, eps: float) -> Norm:
    """x * rsqrt(mean(x^2) + eps) * weight on rows, in six elementwise calls: (x * x).sum
    with the 1/D folded into the add of eps (mean and a Python-scalar add are each
    slower calls; on a [1, 128] row this takes 7.2 us where F.rms_norm takes 9.7)."""
    eps_t = torch.tensor(eps, dtype=weight.dtype, device=weight.device)
    inv_dim = 1.0 / weight.shape[-1]

    def norm(x: torch.Tensor) -> torch.Tensor:
        ms_eps = torch.add(eps_t, (x * x).sum(-1, keepdim=True), alpha=inv_dim)
        return x * ms_eps.rsqrt_() * weight

    return norm


def _norm(module: nn.Module | None, scale: float = 1.0) -> Norm | None:
    """The norm of one slot as a function of a [rows, D] tensor (times `scale`:
    LayerNorm Scaling's 1/sqrt(l) on the input norms)."""
    if module is None:
        return None
    if type(module) in (RMSNorm, ZeroCenteredRMSNorm):
        fn = _rms_norm(module.scale().detach(), module.eps)
    elif type(module) is LayerNorm:
        shape, weight, bias, eps = module.weight.shape, module.weight, module.bias, module.eps

        def fn(x: torch.Tensor) -> torch.Tensor:
            return F.layer_norm(x, shape, weight, bias, eps)
    else:  # DyT: its formula is already a few elementwise calls
        fn = module.reference
    if scale == 1.0:
        return fn
    return lambda x: fn(x) * scale


def _linear(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ weight_t (+ bias) for x [1, in] and weight_t [in, out], one call either way."""
    return torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)


def _in_out(weight: torch.Tensor) -> torch.Tensor:
    """nn.Linear's [out, in] weight as the right factor W of x @ W for one token x [1, in].
    A decode step reads every weight once, out of cache, and MKL's single-row matmul
    streams a wide matrix (out > in) 2-3x faster stored [in, out] (d 256: gate/up 22 vs
    10 GB/s, LM head 25 vs 8.5), while a tall one (down_proj) is faster as the [out, in]
    weight itself: so only wide weights are copied, the rest are transposed views."""
    return weight.t().contiguous() if weight.shape[0] > weight.shape[1] else weight.t()


def _stack(weights: list[torch.Tensor], biases: list[torch.Tensor | None],
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Linears' weights side by side as one [in, sum of out] matrix, and their biases."""
    weight = _in_out(torch.cat(weights))
    return weight, None if biases[0] is None else torch.cat(biases)


def _query_and_gate(t: torch.Tensor, n_heads: int, head_size: int) -> list[torch.Tensor]:
    """q_proj's rows [query (E) | gate (E)] per head -> [all query rows, all gate rows]."""
    return [part.flatten(0, 1) for part in t.unflatten(0, (n_heads, 2 * head_size)).chunk(2, 1)]


class _Attention:
    """Attention of one new token against one layer's slice of the cache."""

    def __init__(self, attn: Attention, cache: KVCache, layer: int) -> None:
        H, K, E = attn.n_heads, attn.n_kv_heads, attn.head_size
        self.H, self.K, self.E, self.G = H, K, E, H // K
        q, k, v = attn.q_proj, attn.k_proj, attn.v_proj
        weights, biases = [q.weight, k.weight, v.weight], [q.bias, k.bias, v.bias]
        self.gated = attn.gated
        if attn.gated:  # Qwen3-Next keeps [query | gate] per head: the gate rows go last
            wq, wg = _query_and_gate(q.weight, H, E)
            weights = [wq, k.weight, v.weight, wg]
            if q.bias is not None:
                bq, bg = _query_and_gate(q.bias, H, E)
                biases = [bq, k.bias, v.bias, bg]
        self.w_qkv, self.b_qkv = _stack(weights, biases)
        self.widths = [(H + K) * E, K * E] + ([H * E] if attn.gated else [])
        self.w_o, self.b_o = _in_out(attn.o_proj.weight), attn.o_proj.bias
        self.qk_norm = None
        if attn.q_norm is not None:  # one RMSNorm over q's and k's head rows together
            scale = torch.cat([attn.q_norm.scale().expand(H, E), attn.k_norm.scale().expand(K, E)])
            self.qk_norm = _rms_norm(scale.detach(), attn.q_norm.eps)
        self.rotate = rotate_half(torch.eye(E, dtype=self.w_qkv.dtype, device=self.w_qkv.device))
        self.use_rope = attn.use_rope
        self.hands_on_v = attn.hands_on_v
        self.v_mix = None if attn.value_residual is None else tuple(attn.value_residual.lambdas)
        self.k_cache, self.v_cache = cache.k[layer], cache.v[layer]

    def __call__(self, h: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor] | None,
                 slot: torch.Tensor, end: int, v_first: torch.Tensor | None,
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        H, K, E, G = self.H, self.K, self.E, self.G
        qk, v, *gate = _linear(h, self.w_qkv, self.b_qkv).split_with_sizes(self.widths, dim=1)
        qk = qk.view(H + K, E)  # q's heads, then k's: one row each
        if self.qk_norm is not None:
            qk = self.qk_norm(qk)
        if self.use_rope:
            cos, sin = cos_sin
            qk = torch.addcmul(qk * cos, qk @ self.rotate, sin)  # x cos + rotate_half(x) sin
        if self.v_mix is not None:
            v = self.v_mix[0] * v + self.v_mix[1] * v_first
        if self.hands_on_v:
            v_first = v
        q, k = qk.split_with_sizes([H, K])
        self.k_cache.index_copy_(2, slot, k.view(1, K, 1, E))
        self.v_cache.index_copy_(2, slot, v.view(1, K, 1, E))
        out = F.scaled_dot_product_attention(  # the G query heads of a K/V head as G queries
            q.view(1, K, G, E), self.k_cache.narrow(2, 0, end), self.v_cache.narrow(2, 0, end))
        out = out.view(1, H * E)
        if self.gated:
            out = out * torch.sigmoid(gate[0])
        return _linear(out, self.w_o, self.b_o), v_first


class _FFN:
    def __init__(self, ffn: nn.Module) -> None:
        self.swiglu = type(ffn) is SwiGLU
        if self.swiglu:
            self.w_in, self.b_in = _stack([ffn.gate_proj.weight, ffn.up_proj.weight],
                                          [ffn.gate_proj.bias, ffn.up_proj.bias])
            self.clamp = ffn.clamp
        else:
            self.w_in, self.b_in = _in_out(ffn.up_proj.weight), ffn.up_proj.bias
            self.act = F.relu if ffn.kind == "relu" else lambda h: F.gelu(h, approximate="tanh")
        self.w_out, self.b_out = _in_out(ffn.down_proj.weight), ffn.down_proj.bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        h = _linear(x, self.w_in, self.b_in)
        if self.swiglu:
            gate, up = h.chunk(2, dim=1)
            if self.clamp is not None:
                gate, up = gate.clamp(max=self.clamp), up.clamp(-self.clamp, self.clamp)
            h = F.silu(gate) * up
        else:
            h = self.act(h)
        return _linear(h, self.w_out, self.b_out)


class _Block:
    """Block.forward for one token, slot by slot (see NORM_SLOTS)."""

    def __init__(self, block: Block, cache: KVCache, layer: int) -> None:
        s = block.in_norm_scale
        self.attn_in, self.attn_out, self.attn_post = (
            _norm(block.attn_norm_in, s), _norm(block.attn_norm_out), _norm(block.attn_norm_post))
        self.mlp_in, self.mlp_out, self.mlp_post = (
            _norm(block.mlp_norm_in, s), _norm(block.mlp_norm_out), _norm(block.mlp_norm_post))
        self.attn = _Attention(block.attn, cache, layer)
        self.mlp = _FFN(block.mlp)
        self.attn_residual, self.mlp_residual = block.attn_residual, block.mlp_residual
        # Stream shortcuts on the block's input (Transformer.forward applies them):
        mix = block.x0_mix
        self.x0_mix = None if mix is None else (float(mix.resid_lambda), float(mix.x0_lambda))
        skip = block.unet_skip
        self.unet_skip = None if skip is None else (float(skip.weight), skip.source)

    def __call__(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor] | None,
                 slot: torch.Tensor, end: int, v_first: torch.Tensor | None,
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.attn_in(x) if self.attn_in else x
        h, v_first = self.attn(h, cos_sin, slot, end, v_first)
        h = self.attn_out(h) if self.attn_out else h
        x = self.attn_residual.forward(x, self.attn_residual.scale(h))
        x = self.attn_post(x) if self.attn_post else x

        h = self.mlp_in(x) if self.mlp_in else x
        h = self.mlp(h)
        h = self.mlp_out(h) if self.mlp_out else h
        x = self.mlp_residual.forward(x, self.mlp_residual.scale(h))
        x = self.mlp_post(x) if self.mlp_post else x
        return x, v_first


# What `DecodeStep` implements, one entry per ModelConfig field: the values it computes
# as `Block.forward` does (ANY: every valid value). A field with no entry, or a value
# outside its set, sends `generate` to the readable forward with the reason, and
# tests/test_decode.py fails when ModelConfig gains a field that has no entry here: a new
# switch cannot reach the step without someone deciding how the step computes it. The
# value sets are written out, not read from the registries: a new FFN, norm, placement or
# position falls back until the step computes it. (depthlab.model.support checks it.)
IMPLEMENTS: dict[str, frozenset | None] = {
    "vocab_size": ANY, "context_len": ANY, "n_layers": ANY, "d_model": ANY,
    "n_heads": ANY, "n_kv_heads": ANY, "head_dim": ANY, "d_ff": ANY,
    "ffn": frozenset({"relu", "gelu", "swiglu"}), "ffn_clamp": ANY,
    # the norms `_norm` computes (a new norm falls back until it is added there)
    "norm": frozenset({"none", "layernorm", "rmsnorm", "rmsnorm_zero_centered", "dyt"}),
    "norm_eps": ANY, "placement": frozenset({"pre", "post", "sandwich", "output"}),
    # one stream; ngpt falls back (its unit-sphere update, scaled q/k, SwiGLU and logits)
    "residual": frozenset({"none", "plain", "scaled", "rezero", "deepnorm"}),
    "norm_scale": frozenset({"none", "depth"}), "value_residual": ANY,
    "streams": frozenset({1}),
    "final_norm": ANY, "qk_norm": ANY, "attn_gate": ANY,
    "position": frozenset({"rope", "learned"}), "rope_theta": ANY,
    "bias": ANY, "qkv_bias": ANY, "tie_embeddings": ANY,
    "init_std": ANY, "init_gain": ANY, "scaled_init": ANY,  # where the weights start: no forward
    # the stream shortcuts (depthlab.model.shortcuts) the step computes; a value embedding
    # and smear (which needs the cache's last embedding) fall back to the readable forward
    "x0_mix": ANY, "backout": ANY, "unet_skips": ANY, "logit_softcap": ANY,
    "value_embeds": frozenset({False}), "smear": frozenset({False}),
    # softmax attention only: a Gated DeltaNet layer decodes on the readable forward, which
    # carries its conv and delta-rule state in the cache (depthlab.model.deltanet.DeltaState)
    "mixer": frozenset({"attention"}), "layer_pattern": frozenset({None}),
    "linear_key_heads": ANY, "linear_value_heads": ANY, "linear_key_dim": ANY,
    "linear_value_dim": ANY, "linear_conv_kernel": ANY,  # no DeltaNet layer: unused
    "rope_fraction": frozenset({1.0}),  # the step rotates whole heads
}
# The module classes the step reads its weights from; a subclass may compute otherwise.
# (The residual's class is the config's `residual`, checked above.)
KNOWN_MODULES = (Transformer, Block, Attention, MLP, SwiGLU, LayerNorm, RMSNorm,
                 ZeroCenteredRMSNorm, DyT)


def _config_reason(cfg: ModelConfig) -> str | None:
    """The first switch of `cfg` that IMPLEMENTS does not cover, said as the user sets it."""
    reason = config_reason(cfg, IMPLEMENTS, "the decode step")
    if reason is not None:
        return reason
    if cfg.qk_norm and cfg.norm not in ("rmsnorm", "rmsnorm_zero_centered"):
        return "a QK-norm other than RMSNorm"  # the step runs q's and k's rows as one RMSNorm
    return None


def unsupported(model: nn.Module, cache: KVCache) -> str | None:
    """Why `DecodeStep` cannot run this model with this cache, or None when it can:
    decided from the config (IMPLEMENTS), then from what the config does not say (the
    module classes, the dtype, the cache's batch, the memory a copy of the weights takes)."""
    if type(model) is not Transformer:
        return f"{type(model).__name__} is not depthlab's Transformer"
    reason = _config_reason(model.cfg)
    if reason is not None:
        return reason
    foreign = next((type(m) for m in model.modules()
                    if isinstance(m, KNOWN_MODULES) and type(m) not in KNOWN_MODULES), None)
    if foreign is not None:
        return f"a module of class {foreign.__name__}, a subclass the step does not know"
    dtype = model.embed_tokens.weight.dtype
    if dtype not in (torch.float32, torch.float64):
        return f"{dtype} weights (the norms keep float32 statistics on the readable path)"
    if cache.k.shape[1] != 1:
        return "a cache of more than one sequence"
    matrices = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    if model.lm_head is None:
        matrices.append(model.embed_tokens.weight)  # the tied LM head
    copied = sum(w.numel() * w.element_size() for w in matrices)
    if copied > WEIGHT_COPY_LIMIT:
        return f"a copy of its weights would take {copied / 2**20:,.0f} MiB"
    return None


def agrees(fast: torch.Tensor, readable: torch.Tensor) -> bool:
    """Whether the step's logits are the readable forward's up to float rounding.

    The two differ by rounding only, a few 1e-7 of the logits' size in float32 (at most
    1.7x the readable cached step's own distance from a full pass, tests/test_decode.py);
    1e-3 of that size is far above rounding and far below any change in what is computed
    (a logit softcap, a norm left out, a wrong rotation move logits by whole units)."""
    scale = max(1.0, float(readable.abs().max()))
    return bool(torch.isfinite(fast).all()) and float((fast - readable).abs().max()) <= 1e-3 * scale


class DecodeStep:
    """Logits for one new token after the tokens already in `cache`, which it extends.

    It holds its own copy of the weights, valid while the model's weights do not change:
    `step_for` keeps the last one and hands it to the next `generate` call on the same
    unchanged model (`bind` points it at that call's cache). Call `unsupported(model,
    cache)` first, and the step under torch.inference_mode() as `generate` does.
    """

    @torch.no_grad()
    def __init__(self, model: Transformer, cache: KVCache) -> None:
        self.cache = cache
        self.blocks = [_Block(b, cache, i) for i, b in enumerate(model.blocks)]
        self.embed = model.embed_tokens.weight
        self.pos_embed = None if model.pos_embed is None else model.pos_embed.weight
        # cos, sin [n, E] and the slot numbers for every position a cache of this model can
        # hold (generate's caches hold at most context_len), so a kept step fits the next
        n = max(model.cfg.context_len, cache.capacity)
        self.rope = model.rope(n, self.embed)
        self.final_norm = _norm(model.final_norm)
        self.x0_norm_eps = model.cfg.norm_eps if model.cfg.x0_mix else None
        self.keep_outputs = model.cfg.unet_skips
        self.backout = None if model.backout is None else (model.backout.layer,
                                                           float(model.backout.lam))
        self.softcap = model.cfg.logit_softcap
        self.head = _in_out((model.embed_tokens if model.lm_head is None else model.lm_head).weight)
        self.slots = torch.arange(n, device=self.embed.device)
        self._hook_tables = [table for m in model.modules()
                             for table in (m._forward_hooks, m._forward_pre_hooks)]

    def bind(self, cache: KVCache) -> DecodeStep:
        """This step, its weights kept, writing into `cache` (a new generate call's)."""
        self.cache = cache
        for i, block in enumerate(self.blocks):
            block.attn.k_cache, block.attn.v_cache = cache.k[i], cache.v[i]
        return self

    def hooks_attached(self) -> bool:
        """True while any module of the model, or every module, has a forward hook:
        then the readable path must run so the hook sees its values."""
        return any(self._hook_tables) or _global_hooks_set()

    def __call__(self, token: int) -> torch.Tensor:
        """Logits [V] for `token` at position cache.length."""
        pos = self.cache.length
        if pos >= self.cache.capacity:
            raise ValueError(f"KV cache holds {self.cache.capacity} tokens; {pos + 1} needed")
        x = self.embed[token:token + 1]
        if self.pos_embed is not None:
            x = x + self.pos_embed[pos:pos + 1]
        cos_sin = None if self.rope is None else (self.rope[0][pos], self.rope[1][pos])
        slot, v_first = self.slots[pos:pos + 1], None
        if self.x0_norm_eps is not None:  # x0_mix: the stream starts at the normalised embedding
            x = F.rms_norm(x, (x.shape[-1],), eps=self.x0_norm_eps)
        x0, outputs, x_mid = x, [], None
        for i, block in enumerate(self.blocks):
            if block.x0_mix is not None:
                x = block.x0_mix[0] * x + block.x0_mix[1] * x0
            if block.unet_skip is not None:
                x = x + block.unet_skip[0] * outputs[block.unet_skip[1]]
            x, v_first = block(x, cos_sin, slot, pos + 1, v_first)
            if self.keep_outputs:
                outputs.append(x)
            if self.backout is not None and i == self.backout[0]:
                x_mid = x
        self.cache.length = pos + 1
        if self.backout is not None:
            x = x - self.backout[1] * x_mid
        x = self.final_norm(x) if self.final_norm else x
        logits = torch.mm(x, self.head)[0]
        return logits if self.softcap is None else self.softcap * torch.tanh(logits / self.softcap)


def weights_key(model: nn.Module) -> tuple[tuple[int, int], ...]:
    """What a step's copies of the weights were made from: each parameter's and buffer's
    storage and version counter (every in-place change, an optimizer step or a load,
    moves it), so an unchanged key means unchanged weights."""
    return tuple((t.data_ptr(), t._version) for t in (*model.parameters(), *model.buffers()))


# The step of the model `generate` ran last, with the key of the weights it copied: a
# DecodeStep's set-up copies the stacked and wide matrices (on SmolLM2-135M about 0.5 s,
# 5% of a 200-token call on the loaded 2-core machine), so calls on an unchanged model
# share one copy. One model's at most: the memory held stays within WEIGHT_COPY_LIMIT.
_kept: tuple[weakref.ref, tuple, DecodeStep] | None = None


def step_for(model: Transformer, cache: KVCache) -> DecodeStep:
    """A DecodeStep for `model` writing into `cache`: the kept one while the model and its
    weights are those it copied (`weights_key`), else a new one, which is then kept."""
    global _kept
    key = weights_key(model)
    kept = _kept
    if (kept is not None and kept[0]() is model and kept[1] == key
            and cache.capacity <= len(kept[2].slots)):
        return kept[2].bind(cache)
    _kept = None  # the old copies go before the new ones are made
    step = DecodeStep(model, cache)
    _kept = (weakref.ref(model), key, step)
    return step
