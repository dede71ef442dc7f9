"""The GPU path, ready to measure: tokens/s, MFU and peak memory of a 124M-parameter
GPT-2-shaped model and a 124M course-shaped model (the course preset's block widened to
GPT-2 small's size), trained as `depthlab train` trains with train.parallel=fsdp on every
GPU present (bench/gpu.sh starts one process per GPU with torchrun).

Every step is the trainer's: the model sharded by depthlab.train.parallel.shard
(fully_shard per block and root, bf16 parameters with fp32 reduction), bf16 autocast,
TF32, fused AdamW, torch.compile (eager with a message if it fails), the global-norm clip
of depthlab.train.step.clip, pinned host batches. Steps are timed after warm-up.
MFU = model FLOPs per token (6N + attention) x tokens/s over (GPUs x the device's dense
bf16 peak from NVIDIA's datasheets, DATASHEET_BF16_TFLOPS; a device missing from the
table gets its measured matmul peak instead, and says so). Peak memory is the largest
torch.cuda.max_memory_allocated over the processes.

Without a CUDA device it prints one line and exits 0. `--device cpu --small` runs the
same code at toy sizes on the CPU (under torchrun with gloo too), to check the script.

    bash bench/gpu.sh [--steps 30] [--no-compile]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from dataclasses import replace

import torch
import torch.distributed as dist
import torch.nn.functional as F

from depthlab.config import Config, ModelConfig
from depthlab.model import Transformer
from depthlab.presets import course, gpt2
from depthlab.train import parallel, runtime
from depthlab.train.optim import make_optimizer
from depthlab.train.step import clip

# Dense bf16 tensor-core peaks from NVIDIA's datasheets (TFLOP/s, without sparsity);
# the first key found in the device's name wins, so the longer names come first.
DATASHEET_BF16_TFLOPS = {"H200": 989.0, "H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.0,
                         "GH200": 989.0, "B200": 2250.0, "A100": 312.0, "A10G": 70.0,
                         "L40S": 362.0, "L4": 121.0, "RTX 4090": 165.0}


def datasheet_peak(name: str) -> float | None:
    """FLOP/s of a device whose name holds a key of the table, else None."""
    for key, tflops in DATASHEET_BF16_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None


def matmul_peak(device: torch.device, n: int, dtype: torch.dtype) -> float:
    """The best of 6 timings of 10 n x n matmuls, in FLOP/s."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(6):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(10):
            torch.mm(a, b)
        sync(device)
        best = min(best, (time.perf_counter() - t0) / 10)
    return 2 * n**3 / best


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def flops_per_token(m: ModelConfig, n_params: int, seq: int) -> float:
    """6 FLOPs per weight a token meets (the embedding table's lookup is free, the tied
    head is not) plus causal attention's 12 x layers x seq x width."""
    n = n_params - m.vocab_size * m.d_model \
        - (m.context_len * m.d_model if m.position == "learned" else 0)
    n += m.vocab_size * m.d_model if m.tie_embeddings else 0
    return 6 * n + 12 * m.n_layers * seq * m.n_heads * m.head_size


def shapes(small: bool) -> dict[str, tuple[ModelConfig, int, int]]:
    """(model, batch per process, seq) of each measured model: GPT-2 small (12 x 768,
    vocab 50304: 124M), and the course block (RoPE, RMSNorm, SwiGLU) at the same size."""
    big = replace(gpt2().model, n_layers=12, d_model=768, n_heads=12, context_len=1024,
                  vocab_size=50304)
    wide = replace(course().model, n_layers=12, d_model=768, n_heads=12, context_len=1024,
                   vocab_size=50304)
    batch, seq = 16, 1024
    if small:
        big = replace(big, n_layers=2, d_model=64, n_heads=2, context_len=64, vocab_size=512)
        wide = replace(wide, n_layers=2, d_model=64, n_heads=2, context_len=64, vocab_size=512)
        batch, seq = 2, 64
    return {"GPT-2-shaped": (big, batch, seq), "course-shaped": (wide, batch, seq)}


def measure(label: str, model_cfg: ModelConfig, batch: int, seq: int, steps: int,
            device: torch.device, world: int, compile_model: bool) -> tuple[float, int, int]:
    """(tokens/s of all processes, parameters, peak bytes of the fullest process)."""
    base = course()
    dtype = "bfloat16" if device.type == "cuda" else "float32"
    cfg = Config(model=model_cfg, data=base.data, train=replace(
        base.train, batch_size=batch * world, seq_len=seq, dtype=dtype, parallel="fsdp"))
    torch.manual_seed(0)
    model = Transformer(cfg.model).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    if dist.is_initialized():
        parallel.shard(model, cfg, device)
    opt = make_optimizer(model, cfg.train)
    fwd = runtime.compile_or_eager(model) if compile_model else model
    host = torch.randint(0, cfg.model.vocab_size, (steps + 5, batch, seq + 1))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def step(i: int) -> None:
        x, y = (runtime.to_device(t, device) for t in (host[i, :, :-1], host[i, :, 1:]))
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = fwd(x)
        F.cross_entropy(logits.float().flatten(0, 1), y.flatten()).backward()
        if dist.is_initialized():
            parallel.average_replicated(model)
        clip(model, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    t_compile = time.perf_counter()
    for i in range(5):  # warm-up, and compilation
        step(i)
    sync(device)
    say(f"  {label}: warm-up (with compilation) {time.perf_counter() - t_compile:.0f} s",
        sys.stderr)
    t0 = time.perf_counter()
    for i in range(steps):
        step(5 + i)
    sync(device)
    elapsed = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    if dist.is_initialized():
        t = torch.tensor([elapsed, float(peak)], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest process sets the pace
        elapsed, peak = float(t[0]), int(t[1])
    return steps * batch * seq * world / elapsed, n_params, peak


def say(line: str, stream=None) -> None:
    """Print on rank 0 only."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(line, file=stream or sys.stdout, flush=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps after 5 of warm-up")
    ap.add_argument("--no-compile", action="store_true", help="eager, without torch.compile")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--small", action="store_true", help="toy sizes (a check of the script)")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error(f"--steps must be at least 1, got {args.steps}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench/gpu: no CUDA device here; nothing measured (the GPU path stays unmeasured)")
        return 0
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(args.device, local) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if parallel.launched_by_torchrun():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
        peak = datasheet_peak(name) if device.type == "cuda" else None
        source = "datasheet"
        if peak is None:
            peak = matmul_peak(device, 256 if args.small else 8192,
                               torch.bfloat16 if device.type == "cuda" else torch.float32)
            source = "measured matmul"
        compile_model = not args.no_compile
        how = "fsdp" if dist.is_initialized() else "one process, unsharded (no torchrun)"
        say(f"{datetime.date.today()} {world} x {name}; torch {torch.__version__}; {how}, "
            f"bf16, compile {'on' if compile_model else 'off'}; {source} peak "
            f"{peak / 1e12:.3g} TFLOP/s per device")
        for label, (m, batch, seq) in shapes(args.small).items():
            tps, n, mem = measure(label, m, batch, seq, args.steps, device, world, compile_model)
            mfu = tps * flops_per_token(m, n, seq) / (world * peak)
            say(f"{label} {n / 1e6:.3g}M params ({world} x {batch} x {seq} tokens a step): "
                f"{tps:,.0f} tokens/s, MFU {mfu:.1%}, peak memory {mem / 2**30:.2f} GiB")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
