"""Before the first step: the data, the model and optimizer (fresh or from a checkpoint),
the run directory's config and log, and the wrapped forward the steps call.

`Run` is what every later stage reads; `LoopState` is what the steps change.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from depthlab.config import Config
from depthlab.errors import UserError
from depthlab.hooks import HookFn
from depthlab.memory import check_fits
from depthlab.metrics import MetricsWriter, truncate_after
from depthlab.model import Transformer
from depthlab.outdir import RUN, short, write_marker
from depthlab.rundir import (
    CONFIG_FILE,
    METRICS_FILE,
    STATE_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    load_fitting,
    read_config,
    write_config,
)
from depthlab.shards import open_shards
from depthlab.tokenizer import (
    TokenData,
    cache_dir,
    load_tokenizer,
    prepare_data,
    tokenizer_fingerprint,
)
from depthlab.train import batches, parallel, runtime, step_reads
from depthlab.train.checkpoint import Checkpoint, restore_sharded
from depthlab.train.optim import Optimizer, make_optimizer, state_mismatch


@dataclass
class Run:
    """One invocation of the trainer, set up: what the steps, evaluations, logs and
    checkpoints all read."""

    cfg: Config
    run_dir: Path
    proc: runtime.Runtime
    data: TokenData
    model: Transformer
    optimizer: Optimizer
    net: torch.nn.Module  # the model, wrapped in DistributedDataParallel under ddp at world > 1
    fwd: Any  # net, compiled when train.compile
    autocast: Any  # bfloat16 autocast, or a null context
    writer: MetricsWriter | None  # rank 0 only
    start_step: int
    probe_batch: tuple[torch.Tensor, torch.Tensor]  # fixed validation batch of every probe
    reads: step_reads.StepReads
    fwd_hooks: list[tuple[str, HookFn]]
    identity: dict[str, str]  # data_identity: saved in every checkpoint beside the weights
    probe_copy: Transformer | None = None  # fsdp, rank 0: the whole model the probes read

    @property
    def sharded(self) -> bool:
        """train.parallel=fsdp: the model's weights are spread over the processes."""
        return self.cfg.train.parallel == "fsdp"

    @property
    def tokens_per_step(self) -> int:
        train_cfg = self.cfg.train
        return train_cfg.batch_size * train_cfg.grad_accum * train_cfg.seq_len


@dataclass
class LoopState:
    """Where the loop stands; step counts finished optimizer steps."""

    step: int
    saved_step: int | None  # the step of the weights on disk (RUN/model.safetensors)
    status: str = "completed"
    message: str = ""
    train_loss: float | None = None
    val_loss: float | None = None
    rate: float = 0.0  # tokens/s over the steps between the last two reads
    rate_from: int = 0
    busy_s: float = 0.0  # time spent in steps since the last read
    run_tokens: int = 0  # tokens trained on in this invocation
    cpu_s: float = 0.0  # process CPU seconds in optimizer steps since the last train line


def resolve_config(cfg: Config, data: TokenData) -> Config:
    """The config a run records: the model's vocabulary is the tokenizer's."""
    return replace(cfg, model=replace(cfg.model, vocab_size=data.vocab_size))


def min_corpus_tokens(seq_len: int, val_fraction: float) -> int:
    """The fewest tokens whose split (the last max(1, floor(n * val_fraction)) tokens are
    validation) leaves seq_len + 1 training tokens, one window and its target, and 2
    validation tokens. Both conditions only get easier as n grows: a bisection."""
    def fits(n: int) -> bool:
        n_val = max(1, int(n * val_fraction))
        return n_val >= 2 and n - n_val >= seq_len + 1

    low, high = 1, 1
    while not fits(high):
        low, high = high, high * 2
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if not fits(mid) else (low, mid)
    return high


def _check_sizes(cfg: Config, data: TokenData) -> None:
    t, d = cfg.train, cfg.data
    if len(data.train) >= t.seq_len + 1 and len(data.val) >= 2:
        return
    if d.shards:
        raise UserError(f"data.shards={d.shards!r}: too few tokens: {len(data.train)} for "
                        f"training and {len(data.val)} for validation; train.seq_len="
                        f"{t.seq_len} needs at least {t.seq_len + 1} and 2; prepare more text "
                        "or lower train.seq_len")
    need = min_corpus_tokens(t.seq_len, d.val_fraction)
    per = ("one token per character" if d.tokenizer == "char" else
           "BPE makes fewer tokens than characters, so give more text than that")
    raise UserError(f"corpus {d.corpus!r} is too small: {len(data.train) + len(data.val)} "
                    f"{d.tokenizer} tokens; train.seq_len={t.seq_len} with "
                    f"data.val_fraction={d.val_fraction:g} needs at least {need} tokens ({per}), "
                    "or lower train.seq_len")


def prepare(cfg: Config, proc: runtime.Runtime,
            cache_root: Path | None) -> tuple[Config, TokenData]:
    """The tokenised corpus (rank 0 encodes; the others then read its cache) and the
    resolved config, checked against the data and the device's memory."""
    if proc.is_main:
        data = _tokenised(cfg, cache_root)
    proc.barrier()
    if not proc.is_main:
        data = _tokenised(cfg, cache_root)
    cfg = resolve_config(cfg, data)
    _check_sizes(cfg, data)
    check_fits(cfg, str(proc.device), world=proc.world)
    return cfg, data


def _tokenised(cfg: Config, cache_root: Path | None) -> TokenData:
    """prepare_data, with a token cache that cannot be written (a full disk) named by its
    path: the run directory is not the place that failed."""
    if cfg.data.shards:  # read by offset: nothing to encode or cache
        return open_shards(cfg.data.shards)
    root = Path(cache_root or cache_dir())
    try:
        return prepare_data(cfg.data, cache_root)
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        raise UserError(f"{root}: the token cache cannot be written{where}: "
                        f"{e.strerror or e}; free space there or set DEPTHLAB_CACHE to "
                        "another folder (nothing was written to the run)") from None


def build(cfg: Config, proc: runtime.Runtime,
          ckpt: Checkpoint | None) -> tuple[Transformer, Optimizer]:
    """The model at init from train.seed, with the checkpoint's weights when resuming
    (checked tensor by tensor against the config), and its optimizer."""
    torch.manual_seed(cfg.train.seed)
    model = Transformer(cfg.model).to(proc.device)
    if ckpt is not None and not ckpt.sharded:
        load_fitting(model, ckpt.weights, f"{ckpt.path} does not fit the config")
    if cfg.train.activation_checkpointing:
        parallel.checkpoint_blocks(model)
    if cfg.train.parallel == "fsdp":  # before the optimizer: it steps the shards
        parallel.shard(model, cfg, proc.device)
    return model, make_optimizer(model, cfg.train)


def check_kind(cfg: Config, ckpt: Checkpoint | None) -> None:
    """A checkpoint written by one process or ddp (whole weights and an optimizer state
    indexed by parameter order) cannot be resharded: fsdp refuses it by name. A DCP
    checkpoint resumes under any train.parallel and world size."""
    if ckpt is not None and not ckpt.sharded and cfg.train.parallel == "fsdp":
        raise UserError(f"{ckpt.path}: written by one process or train.parallel=ddp "
                        f"({WEIGHTS_FILE} + {STATE_FILE}), which train.parallel=fsdp cannot "
                        "shard; resume it with train.parallel=ddp; nothing was changed")


def restore(model: Transformer, optimizer: Optimizer, ckpt: Checkpoint) -> None:
    """The checkpoint's optimizer state and RNG, checked first: a state.pt that does not
    fit is a one-line error naming it, before anything is loaded or written. A DCP
    checkpoint's model and optimizer are read here too (depthlab.train.checkpoint)."""
    where = f"{ckpt.path / STATE_FILE}"
    if ckpt.sharded:
        restore_sharded(model, optimizer, ckpt)
        why = None
    else:
        why = state_mismatch(optimizer, ckpt.state.get("optimizer"))
    rng = ckpt.state.get("torch_rng")
    if why is None and not (isinstance(rng, torch.Tensor) and rng.dtype == torch.uint8):
        why = "torch_rng is not a byte tensor"
    if why is None:
        try:
            if not ckpt.sharded:
                optimizer.load_state_dict(ckpt.state["optimizer"])
            torch.set_rng_state(rng)
        except (KeyError, ValueError, TypeError, RuntimeError) as e:
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if why is not None:
        raise UserError(f"{where}: does not fit this run ({why}); nothing was changed. Move "
                        f"that checkpoint folder away to resume from the one before it, or "
                        "pass --overwrite to start over")


def start(cfg: Config, run_dir: Path, proc: runtime.Runtime, data: TokenData, model: Transformer,
          optimizer: Optimizer, ckpt: Checkpoint | None,
          fwd_hooks: list[tuple[str, HookFn]]) -> Run:
    """Restore the optimizer and RNG of a resumed run, open the log and wrap the model."""
    start_step = 0
    if ckpt is not None:  # check_same_data ran before the model was built
        restore(model, optimizer, ckpt)
        start_step = ckpt.step
    writer = _open_log(cfg, run_dir, proc, data, ckpt, start_step) if proc.is_main else None
    net: torch.nn.Module = model
    if proc.world > 1 and cfg.train.parallel == "ddp":  # fsdp: `build` sharded the model
        net = DistributedDataParallel(
            model, device_ids=[proc.local_rank] if proc.device.type == "cuda" else None)
    train_cfg = cfg.train
    return Run(
        cfg=cfg, run_dir=run_dir, proc=proc, data=data, model=model, optimizer=optimizer, net=net,
        fwd=runtime.compile_or_eager(net) if train_cfg.compile else net,
        autocast=(torch.autocast(proc.device.type, dtype=torch.bfloat16)
                  if train_cfg.dtype == "bfloat16" else contextlib.nullcontext()),
        writer=writer, start_step=start_step,
        probe_batch=batches.fixed_batch(data.val, train_cfg.batch_size, train_cfg.seq_len, proc.device),
        reads=step_reads.StepReads(proc.device), fwd_hooks=fwd_hooks,
        identity=data_identity(data))


_SHA256 = re.compile(r"[0-9a-f]{64}")


def data_identity(data: TokenData) -> dict[str, str]:
    """What each checkpoint stores beside its weights about the text it was trained on."""
    return {"corpus_sha256": data.corpus_sha256,
            "tokenizer_sha256": tokenizer_fingerprint(data.tokenizer)}


def _recorded_text(run_dir: Path, record: dict[str, Any], ckpt: Checkpoint | None) -> str:
    """config.json's corpus.sha256, well formed and (when the checkpoint stores one) the
    checkpoint's own; one line naming the file and field otherwise."""
    where = f"{Path(run_dir) / CONFIG_FILE}: field corpus.sha256"
    corpus = record.get("corpus")
    value = corpus.get("sha256") if isinstance(corpus, dict) else None
    if value is None:
        raise UserError(f"{where} is missing, so --resume cannot check the text the run was "
                        f"trained on; nothing was changed. {_RESTORE}")
    if not (isinstance(value, str) and _SHA256.fullmatch(value)):
        raise UserError(f"{where} is {short(json.dumps(value), 40)}, not a sha256 (64 hex "
                        f"digits), so --resume cannot check the text the run was trained on; "
                        f"nothing was changed. {_RESTORE}")
    saved = _saved(ckpt, "corpus_sha256")
    if saved is not None and saved != value:
        raise UserError(f"{where} is {value[:12]}..., but {ckpt.path / STATE_FILE} was trained "
                        f"on the text {saved[:12]}...; nothing was changed. {_RESTORE}")
    return value


_RESTORE = "Restore it, or pass --overwrite to start over"


def check_same_data(run_dir: Path, data: TokenData, ckpt: Checkpoint | None = None,
                    note: bool = True) -> None:
    """A resume reads the corpus again and rebuilds its tokenizer from it: refuse when the
    text is not the one the run was trained on (an edited file gives other token ids, and
    the run's tokenizer.json, which generate decodes with, would no longer match the
    weights). The text's sha256 and the tokenizer's fingerprint travel in every checkpoint
    beside its weights (`data_identity`); config.json's corpus.sha256 must be well formed
    and agree, and RUN/tokenizer.json must map what the rebuilt tokenizer maps.
    `note` (the main rank): say so when the thread count differs from the one it trained
    on, which keeps the run going but not bit for bit."""
    record = read_config(run_dir)[1]
    recorded = _recorded_text(run_dir, record, ckpt)
    spec = (record.get("corpus") or {}).get("spec")
    if recorded != data.corpus_sha256:
        raise UserError(f"{run_dir}: --resume needs the corpus the run was trained on: "
                        f"{spec!r} now has sha256 {data.corpus_sha256[:12]}..., "
                        f"the run recorded {recorded[:12]}...; nothing was changed. Restore "
                        "that text, or pass --overwrite to start over")
    _check_run_tokenizer(run_dir, data, ckpt)
    was, now = record.get("threads_used"), torch.get_num_threads()
    if note and isinstance(was, int) and was != now:  # CPU sums split another way round otherwise
        print(f"depthlab: note: {run_dir} trained on {was} thread(s) and resumes on {now}; "
              f"from here its numbers may differ in the last bits from an uninterrupted run "
              f"(--threads {was} keeps them bit for bit)", file=sys.stderr)


def _saved(ckpt: Checkpoint | None, key: str) -> str | None:
    """What the checkpoint's state.pt says about its text (None for a checkpoint written
    before it said anything)."""
    data = ckpt.state.get("data") if ckpt is not None else None
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def _check_run_tokenizer(run_dir: Path, data: TokenData, ckpt: Checkpoint | None) -> None:
    """RUN/tokenizer.json maps what the corpus's tokenizer maps, and what the checkpoint
    was trained with."""
    path = Path(run_dir) / TOKENIZER_FILE
    if not path.is_file():
        raise UserError(f"{path}: missing; the run's weights were trained with it, so "
                        f"--resume refuses; nothing was changed. {_RESTORE}")
    try:
        own = tokenizer_fingerprint(load_tokenizer(path))
    except UserError as e:
        raise UserError(f"{e}; --resume refuses, nothing was changed") from None
    if own != tokenizer_fingerprint(data.tokenizer):
        source = (f"the token shards in {data.path} were encoded with" if data.from_shards
                  else "the corpus gives")
        raise UserError(f"{path}: does not map the tokens {source}; nothing was "
                        f"changed. {_RESTORE}")
    saved = _saved(ckpt, "tokenizer_sha256")
    if saved is not None and own != saved:
        raise UserError(f"{path}: does not map the tokens {ckpt.path / STATE_FILE} was "
                        f"trained with; nothing was changed. {_RESTORE}")


def _open_log(cfg: Config, run_dir: Path, proc: runtime.Runtime, data: TokenData,
              ckpt: Checkpoint | None, start_step: int) -> MetricsWriter:
    """A fresh run writes config.json and tokenizer.json and starts a fresh log; a resumed
    one cuts its log back to the checkpoint's step. Either way, a run_start line."""
    train_cfg = cfg.train
    write_marker(run_dir, RUN)  # the first write: depthlab owns this directory from here on
    if ckpt is None:
        write_config(run_dir, cfg, seed=train_cfg.seed,
                     tokenizer={"kind": data.tokenizer.kind, "file": TOKENIZER_FILE,
                                "vocab_size": data.vocab_size},
                     corpus={"spec": data.corpus, "sha256": data.corpus_sha256,
                             "train_tokens": len(data.train), "val_tokens": len(data.val)},
                     world_size=proc.world, threads_used=torch.get_num_threads())
        data.tokenizer.save(run_dir / TOKENIZER_FILE)
        (run_dir / METRICS_FILE).unlink(missing_ok=True)
    else:
        truncate_after(run_dir, start_step)
    writer = MetricsWriter(run_dir)
    writer.log("run_start", step=start_step, steps=train_cfg.steps, world_size=proc.world,
               device=str(proc.device), resumed_from=start_step if ckpt else None)
    return writer
