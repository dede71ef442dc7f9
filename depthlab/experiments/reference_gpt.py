"""The reference loop: nanoGPT's model and its CPU recipe for char-level Shakespeare, the
yardstick the speedrun experiment races against (and bench/reference_loop.py times
depthlab's step against; this module is the one home of both).

The model is nanoGPT's `model.py` at `bias=False`, dropout 0: learned positions, one
fused QKV projection, pre-LayerNorm, exact GELU with d_ff = 4d, tied head, weights drawn
from N(0, 0.02) with the output projections at 0.02/sqrt(2L). The recipe is nanoGPT's
README command for a CPU (`config/train_shakespeare_char.py` with 4 layers, d 128,
4 heads, context 64, batch 12, 2,000 iterations): AdamW at lr 1e-3, betas (0.9, 0.99),
weight decay 0.1 on the matrices and embeddings only, 100 warmup steps then cosine decay
to a tenth (depthlab.train.optim.lr_at, the same shape), gradients clipped at 1.0.

`train_reference` trains it on depthlab's batches of the run's corpus and scores it on
depthlab's validation windows (depthlab.train.evaluate), so its losses and the arms'
are measured on the same tokens; it writes a run directory whose metric log has the
trainer's line kinds and keys, `cpu_s` included.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.config import Config
from depthlab.metrics import MetricsWriter
from depthlab.rundir import write_config


class Block(nn.Module):
    def __init__(self, d: int, heads: int, layers: int, bias: bool, gelu: str) -> None:
        super().__init__()
        self.heads, self.gelu = heads, gelu
        self.ln1, self.ln2 = nn.LayerNorm(d, bias=bias), nn.LayerNorm(d, bias=bias)
        self.qkv = nn.Linear(d, 3 * d, bias=bias)
        self.proj = nn.Linear(d, d, bias=bias)
        self.fc = nn.Linear(d, 4 * d, bias=bias)
        self.fc_proj = nn.Linear(4 * d, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate=self.gelu))


class RefGPT(nn.Module):
    """nanoGPT's GPT. bias and gelu ("none": exact, nanoGPT's; "tanh") let the step
    bench match the gpt2 preset's biases and GELU form; the recipe keeps nanoGPT's."""

    def __init__(self, vocab: int, ctx: int, d: int, layers: int, heads: int,
                 bias: bool = False, gelu: str = "none") -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads, layers, bias, gelu) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, bias=bias)
        for m in self.modules():  # nanoGPT's _init_weights (norms keep 1 and 0)
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for block in self.blocks:  # and its c_proj weights, scaled by depth
            for proj in (block.proj, block.fc_proj):
                nn.init.normal_(proj.weight, 0.0, 0.02 / math.sqrt(2 * layers))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T


def recipe_optimizer(model: nn.Module, cfg: Config) -> torch.optim.AdamW:
    """nanoGPT's configure_optimizers: weight decay on every parameter of 2 or more
    dimensions (matrices, embeddings), none on norm weights and biases."""
    train_cfg = cfg.train
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": train_cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=train_cfg.lr, betas=(train_cfg.beta1, train_cfg.beta2))


def build(cfg: Config) -> RefGPT:
    m = cfg.model
    torch.manual_seed(cfg.train.seed)
    return RefGPT(m.vocab_size, m.context_len, m.d_model, m.n_layers, m.n_heads)


def train_reference(cfg: Config, run_dir: Path) -> None:
    """Train the reference at `cfg` (its model shape, corpus, seed and train settings)
    into run_dir from scratch, on one thread: run_start, train lines every log_every
    steps (with cpu_s, the process CPU seconds of the steps since the line before),
    eval lines every eval_every steps and at the end, run_end. No checkpoints: an
    interrupted reference is trained again, a minute or two at the standard budget."""
    from depthlab.tokenizer import prepare_data
    from depthlab.train import batches, resolve_config
    from depthlab.train.evaluate import evaluate
    from depthlab.train.optim import lr_at
    from depthlab.train.runtime import Runtime, keep_freed_memory
    from depthlab.train.step import lm_loss

    data = prepare_data(cfg.data)
    cfg = resolve_config(cfg, data)
    train_cfg, cpu = cfg.train, torch.device("cpu")
    proc = Runtime(rank=0, world=1, local_rank=0, device=cpu, owns_group=False)
    keep_freed_memory()  # malloc as depthlab's trainer sets it: the race compares steps
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = build(cfg)
        opt = recipe_optimizer(model, cfg)
        tokens = train_cfg.batch_size * train_cfg.seq_len
        write_config(run_dir, cfg, seed=train_cfg.seed, kind="reference-loop",
                     model="nanoGPT (depthlab.experiments.reference_gpt), not depthlab's model")
        with MetricsWriter(run_dir) as log:
            log.log("run_start", step=0, steps=train_cfg.steps, world_size=1, device="cpu",
                    resumed_from=None)
            log.log("eval", step=0, tokens=0, val_loss=evaluate(model, data, cfg, proc))
            spent, busy, logged = 0.0, 0.0, 0
            for step in range(train_cfg.steps):
                c0, t0 = time.process_time(), time.perf_counter()
                lr = lr_at(step, train_cfg)
                for group in opt.param_groups:
                    group["lr"] = lr
                x, y = batches.train_batch(data.train, train_cfg.seed, step, 0, train_cfg.batch_size,
                                           train_cfg.seq_len, 0, 1, cpu)
                loss = lm_loss(model(x), y)
                loss.backward()
                grad_norm = nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
                opt.step()
                opt.zero_grad(set_to_none=True)
                spent += time.process_time() - c0
                busy += time.perf_counter() - t0
                done = step + 1
                if done % train_cfg.log_every == 0 or done == train_cfg.steps:
                    log.log("train", step=done, tokens=done * tokens, loss=loss.item(), lr=lr,
                            grad_norm=grad_norm.item(),
                            tokens_per_s=(done - logged) * tokens / max(busy, 1e-9),
                            cpu_s=round(spent, 6))
                    spent, busy, logged = 0.0, 0.0, done
                if done % train_cfg.eval_every == 0 or done == train_cfg.steps:
                    log.log("eval", step=done, tokens=done * tokens,
                            val_loss=evaluate(model, data, cfg, proc))
            log.log("run_end", step=train_cfg.steps, status="completed", message="reference loop",
                    diverged=False)
    finally:
        torch.set_num_threads(threads)
