"""The GPU path, measured: MFU of a 124M-parameter GPT-2-shaped model and tokens/s of the
course model, on whatever CUDA device is present (bench/gpu.sh runs this).

Every step uses what `depthlab train` uses on CUDA: bf16 autocast, TF32 matmuls, fused
AdamW, torch.compile (eager with a message if it fails), pinned host batches copied
without blocking, and SDPA with is_causal (flash attention for bf16). Steps are timed
with CUDA events after warm-up. MFU = model FLOPs per token (6N + attention, as in
bench/train_throughput.py) x tokens/s, over the measured bf16 matmul peak of this device
(and over its datasheet peak when the device is one we know).

Without a CUDA device it prints one line and exits 0. `--device cpu --small` runs the
same code at toy sizes on the CPU, to check the script itself.

    python bench/gpu.py [--steps 30] [--no-compile]
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from depthlab.model import Transformer
from depthlab.presets import course, gpt2
from depthlab.train import runtime
from depthlab.train.optim import make_optimizer

# Dense bf16 tensor-core peaks from NVIDIA's datasheets (TFLOP/s, without sparsity).
DATASHEET_BF16_TFLOPS = {"H200": 989.0, "H100 SXM": 989.0, "H100 PCIe": 756.0,
                         "H100": 989.0, "A100": 312.0, "L4": 121.0, "A10G": 70.0,
                         "RTX 4090": 165.0}


def datasheet_peak(name: str) -> float | None:
    for key, tflops in DATASHEET_BF16_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None


def matmul_peak(device: torch.device, n: int, dtype: torch.dtype) -> float:
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


def flops_per_token(model: Transformer, seq: int) -> float:
    cfg = model.cfg
    n = sum(p.numel() for name, p in model.named_parameters()
            if not name.startswith(("embed_tokens", "pos_embed")))
    n += cfg.vocab_size * cfg.d_model if cfg.tie_embeddings else 0
    return 6 * n + 12 * cfg.n_layers * seq * cfg.n_heads * cfg.head_size


def measure(label: str, model_cfg, batch: int, seq: int, steps: int, device: torch.device,
            compile_model: bool) -> tuple[float, float, int]:
    """(tokens/s, FLOPs per token, parameters) of `steps` training steps after warm-up."""
    cfg = course()
    cfg = replace(cfg, model=model_cfg, train=replace(cfg.train, batch_size=batch, seq_len=seq))
    torch.manual_seed(0)
    model = Transformer(cfg.model).to(device)
    opt = make_optimizer(model, cfg.train)
    fwd = runtime.compile_or_eager(model) if compile_model else model
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    host = torch.randint(0, cfg.model.vocab_size, (steps + 5, batch, seq + 1))

    def step(i: int) -> None:
        x, y = (runtime.to_device(t, device) for t in (host[i, :, :-1], host[i, :, 1:]))
        with torch.autocast(device.type, dtype=dtype, enabled=device.type == "cuda"):
            logits = fwd(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    t_compile = time.perf_counter()
    for i in range(5):  # warm-up, and compilation
        step(i)
    sync(device)
    print(f"  {label}: warm-up (with compilation) {time.perf_counter() - t_compile:.0f} s",
          file=sys.stderr)
    t0 = time.perf_counter()
    for i in range(steps):
        step(5 + i)
    sync(device)
    n_params = sum(p.numel() for p in model.parameters())
    return steps * batch * seq / (time.perf_counter() - t0), flops_per_token(model, seq), n_params


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="toy sizes (a check of the script)")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench/gpu: no CUDA device here; nothing measured (the GPU path stays unmeasured)")
        return 0
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    peak = matmul_peak(device, 256 if args.small else 8192,
                       torch.bfloat16 if device.type == "cuda" else torch.float32)
    sheet = datasheet_peak(name) if device.type == "cuda" else None
    # GPT-2 small: 12 layers, d 768, 12 heads, context 1024, vocab 50304 -> 124M parameters.
    big = replace(gpt2().model, n_layers=12, d_model=768, n_heads=12, context_len=1024,
                  vocab_size=50304)
    big_batch, big_seq = 16, 1024
    course_cfg = replace(course().model, vocab_size=65)  # char Shakespeare
    course_batch, course_seq = 16, 128
    if args.small:
        big = replace(big, n_layers=2, d_model=64, n_heads=2, context_len=64, vocab_size=512)
        big_batch, big_seq = 2, 64
    compile_model = not args.no_compile
    print(f"{datetime.date.today()} {name}; torch {torch.__version__}; bf16 autocast, TF32, "
          f"fused AdamW, compile {'on' if compile_model else 'off'}, flash SDPA; "
          f"measured matmul peak {peak / 1e12:.1f} TFLOP/s")
    tps, fpt, n = measure("124M", big, big_batch, big_seq, args.steps, device, compile_model)
    mfu = tps * fpt / peak
    line = (f"GPT-2-shaped {n / 1e6:.0f}M params (batch {big_batch} x {big_seq}): "
            f"{tps:,.0f} tokens/s, MFU {mfu:.1%} of measured peak")
    if sheet:
        line += f", {tps * fpt / sheet:.1%} of the datasheet {sheet / 1e12:.0f} TFLOP/s"
    print(line)
    tps, fpt, n = measure("course", course_cfg, course_batch, course_seq, args.steps, device,
                          compile_model)
    print(f"course model {n / 1e6:.2f}M params (batch {course_batch} x {course_seq}): "
          f"{tps:,.0f} tokens/s, {tps * fpt / peak:.1%} of measured peak")
    return 0


if __name__ == "__main__":
    sys.exit(main())
