"""Where a run executes: device, threads, memory, torchrun ranks, compilation and stop
signals.

Thread default (train.threads=0): depthlab.threads' rule, shared by every command that
runs a model: one thread per process up to d_model 256 and always under torchrun; the
idle cores only for wider models. bench/train_speed.py measures one against two threads
at the course shapes (docs/speed.md has its figures).

On CUDA: TF32 matmuls, pinned host batches copied without blocking; bf16 autocast
(train.dtype), fused AdamW and flash attention (SDPA with is_causal picks it for
half-precision inputs) come from the loop, the optimizer and the model.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from depthlab.config import Config
from depthlab.errors import UserError
from depthlab.threads import use_threads
from depthlab.train.parallel import check, launched_by_torchrun


@dataclass(frozen=True)
class Runtime:
    rank: int
    world: int
    local_rank: int
    device: torch.device
    owns_group: bool  # this run created the process group and must destroy it

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def close(self) -> None:
        if self.owns_group and dist.is_initialized():
            # Leave together: a rank that tears down its gloo pairs while a peer is still
            # finishing can make that peer abort on a closed connection.
            with contextlib.suppress(RuntimeError):
                dist.barrier()
            dist.destroy_process_group()


def pick_device(name: str, local_rank: int = 0, field: str = "train.device") -> torch.device:
    """The device `name` asks for (auto: CUDA, else MPS, else CPU), or a one-line UserError
    naming `field` (the config field or flag that gave it) when this machine has none."""
    if name == "auto":
        if torch.cuda.is_available():
            name = "cuda"
        elif getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            name = "mps"
        else:
            name = "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"{field}=cuda but no CUDA device is available to this torch "
                            f"({torch.__version__})")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    if name == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"{field}=mps but MPS is not available")
    return torch.device(name)


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host batch on `device`: on CUDA through pinned memory and a copy that does not
    block the host, so the next batch is prepared while the GPU still computes."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def compile_or_eager(net: torch.nn.Module) -> Callable[..., torch.Tensor]:
    """`torch.compile(net)`, falling back to eager `net` with a one-line message when the
    first compiled call fails (no C++ toolchain, an unsupported backend); later errors
    are real ones and propagate."""
    compiled = torch.compile(net)
    state = {"fn": compiled, "proven": False}

    def forward(*args: object, **kwargs: object) -> torch.Tensor:
        if state["proven"]:
            return state["fn"](*args, **kwargs)
        try:
            out = state["fn"](*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - any compiler failure means: run eager
            if state["fn"] is net:
                raise
            detail = (str(e).strip().splitlines() or [""])[0][:160]
            print(f"train.compile: torch.compile failed ({type(e).__name__}: {detail}); "
                  "continuing without compilation", file=sys.stderr)
            state["fn"] = net
            out = net(*args, **kwargs)
        state["proven"] = True
        return out

    return forward


# glibc's mallopt parameters (malloc.h) and the values keep_freed_memory sets
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAP_UP_TO = 32 << 20  # blocks up to 32 MB (glibc's largest mmap threshold) from the heap
NEVER_TRIM = 1 << 30  # free space at the heap's top kept up to 1 GB


BFLOAT16_INSTRUCTIONS = ("avx512_bf16", "amx_bf16")  # torch.cpu.get_capabilities() keys


def cpu_bfloat16_instructions() -> list[str]:
    """The bfloat16 instructions torch reports on this CPU (AVX512-BF16, AMX): empty
    where it reports none or cannot tell."""
    try:  # torch >= 2.6 on x86; elsewhere the keys may be missing
        caps = torch.cpu.get_capabilities()
    except (AttributeError, RuntimeError):
        return []
    return [name for name in BFLOAT16_INSTRUCTIONS if caps.get(name)]


def bfloat16_advice(cfg: Config, device: torch.device) -> str | None:
    """One line when a run asks for bfloat16 on a CPU that has no bfloat16 instructions:
    autocast then emulates its matmuls, several times slower than float32. None
    otherwise."""
    if cfg.train.dtype != "bfloat16" or device.type != "cpu" or cpu_bfloat16_instructions():
        return None
    return ("depthlab: note: train.dtype=bfloat16 on a CPU without bfloat16 instructions "
            "(torch reports neither avx512_bf16 nor amx_bf16) is emulated and runs several "
            "times slower than train.dtype=float32, the default")


def keep_freed_memory() -> bool:
    """On glibc, keep what a CPU training step frees for the next step to reuse.

    A step frees and allocates the same tensors every step. Under glibc's defaults some
    go back to the system when freed (the heap's top is trimmed; blocks above a threshold
    that moves with what was freed get fresh mmaps) and come back as page faults, each a
    kernel entry and a zeroed page: the course preset at its CPU recipe's shape took
    1,000-1,700 faults a step, about 3% of its time; the gpt2 preset none
    (bench/step_cost.py counts them). Blocks up to 32 MB from the heap, and a heap never
    trimmed, leave none. The price: the process keeps its peak memory until it exits,
    which a training run reaches again every step. Returns whether malloc took both (off
    glibc, macOS, Windows or musl, nothing is changed: False)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, HEAP_UP_TO)
                and libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))


def start(cfg: Config) -> Runtime:
    """Join torchrun's process group when launched by it; choose device and threads; on
    CPU, keep freed memory in the process (`keep_freed_memory`: for the whole process,
    which keeps its peak memory until it exits)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(cfg.train.device, local_rank)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # float32 matmuls on tensor cores
        torch.backends.cudnn.allow_tf32 = True
    if device.type == "cpu":
        keep_freed_memory()
    use_threads(cfg.train.threads, cfg.model.d_model, world, name="train.threads (--threads)",
                training=True)
    owns = False
    check(cfg, world, launched_by_torchrun())
    if world > 1 or cfg.train.parallel == "fsdp":  # fsdp at world 1 still needs its group
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
            owns = True
    return Runtime(rank, world, local_rank, device, owns)


class StopSignals:
    """SIGINT/SIGTERM set a flag the loop checks after each step (a second Ctrl-C
    stops at once). Handlers are restored on exit."""

    def __init__(self) -> None:
        self.requested = False
        self._old: dict[int, object] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopSignals:
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread: no handlers, no clean stop
            self._old.clear()
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
