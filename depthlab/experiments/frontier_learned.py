"""What the trained widened-stream models learned, read from their checkpoints for the
page: the stream-mixing matrix of every hyper-connection write (hc, mhc) and the depth
weights of every attention-residual sublayer (attnres).

The reader asks the model, in this order, and takes the first that answers:
  1. hook points named `...hook_mixing` (a tensor [..., n, n]: the matrix that mixes
     the n streams at that write, per token) and `...hook_depth_weights` ([..., k]: the
     softmax weights over the k earlier sources), recorded on a fixed validation batch
     and averaged over every leading axis (batch, tokens);
  2. module attributes `mixing_matrix` / `comb` ([n, n]) and `depth_weights` ([k]),
     tensors or methods returning one (the input-independent part).
A model that offers neither yields empty lists, which the report states as such.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

LEARNED_ARMS = ("hc", "mhc", "attnres")
MIXING_HOOK, DEPTH_HOOK = "hook_mixing", "hook_depth_weights"
MIXING_ATTRS, DEPTH_ATTRS = ("mixing_matrix", "comb"), ("depth_weights",)
PAGE_DATA_FILE = "frontier.json"


def _order(name: str) -> list:
    """Natural order of module names: blocks.2 before blocks.10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _attr_tensor(module: nn.Module, attrs: tuple[str, ...]) -> torch.Tensor | None:
    for attr in attrs:
        value = getattr(module, attr, None)
        if callable(value) and not isinstance(value, nn.Module | torch.Tensor):
            value = value()
        if isinstance(value, torch.Tensor):
            return value.detach().float()
    return None


def _hooked(model: nn.Module, x: torch.Tensor | None) -> dict[str, torch.Tensor]:
    names = [n for n, _ in model.named_modules()
             if n.endswith(MIXING_HOOK) or n.endswith(DEPTH_HOOK)]
    if not names or x is None or not hasattr(model, "run_with_cache"):
        return {}
    with torch.no_grad():
        _, cache = model.run_with_cache(x, names=names)
    return {n: cache[n].float() for n in cache.keys()}


def _averaged(t: torch.Tensor, dims: int) -> torch.Tensor:
    """Mean over every axis but the last `dims`."""
    return t.reshape(-1, *t.shape[t.dim() - dims:]).mean(0) if t.dim() > dims else t


def read_learned(model: nn.Module, x: torch.Tensor | None = None) -> dict[str, list]:
    """{"mixing": [{"name", "matrix"}], "depth_weights": [{"name", "weights"}]} in
    layer order; hooks first (on the batch x), module attributes otherwise."""
    cached = _hooked(model, x)
    mixing = [(n, _averaged(t, 2)) for n, t in cached.items() if n.endswith(MIXING_HOOK)]
    depth = [(n, _averaged(t, 1)) for n, t in cached.items() if n.endswith(DEPTH_HOOK)]
    if not mixing:
        mixing = [(n, m) for n, mod in model.named_modules()
                  if (m := _attr_tensor(mod, MIXING_ATTRS)) is not None
                  and m.dim() == 2 and m.shape[0] == m.shape[1]]
    if not depth:
        depth = [(n, w) for n, mod in model.named_modules()
                 if (w := _attr_tensor(mod, DEPTH_ATTRS)) is not None and w.dim() == 1]
    mixing.sort(key=lambda p: _order(p[0]))
    depth.sort(key=lambda p: _order(p[0]))
    return {"mixing": [{"name": n, "matrix": m.tolist()} for n, m in mixing],
            "depth_weights": [{"name": n, "weights": w.tolist()} for n, w in depth]}


def composite_gain(matrices: list[list[list[float]]]) -> float:
    """The largest absolute row or column sum of the product of the mixing matrices over
    depth (last write leftmost): how much the stack of mixes can amplify a signal. It is 1
    for doubly stochastic matrices (mHC) at any depth; unconstrained HC can drift from it."""
    if not matrices:
        return math.nan
    product = torch.eye(len(matrices[0]), dtype=torch.float64)
    for m in matrices:
        product = torch.tensor(m, dtype=torch.float64) @ product
    a = product.abs()
    return float(max(a.sum(0).max(), a.sum(1).max()))


def read_run(run_dir: Path) -> dict[str, Any]:
    """The learned structures of one trained run, on its fixed validation batch."""
    from depthlab.rundir import load_model
    from depthlab.tokenizer import prepare_data
    from depthlab.train import batches

    model, cfg = load_model(run_dir)
    data = prepare_data(cfg.data)
    x, _ = batches.fixed_batch(data.val, 8, cfg.train.seq_len, torch.device("cpu"))
    learned = read_learned(model, x)
    learned["composite_gain"] = composite_gain([e["matrix"] for e in learned["mixing"]])
    return learned


def read_runs(results: list) -> dict[str, dict]:
    """arm name -> learned structures of its first seed's trained model; a run whose
    checkpoint cannot be read is recorded with the reason instead of stopping the report."""
    from depthlab.errors import UserError

    out: dict[str, dict] = {}
    for r in results:
        if r.spec.arm in out:
            continue
        try:
            out[r.spec.arm] = {"seed": r.spec.seed, **read_run(r.run_dir)}
        except (UserError, OSError, ValueError, RuntimeError) as e:
            out[r.spec.arm] = {"seed": r.spec.seed, "mixing": [], "depth_weights": [],
                               "error": f"{type(e).__name__}: {e}"}
    return out


def _finite(obj: Any) -> Any:
    """NaN and infinities as null, so the file is strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def write_page_data(root: Path, data: dict) -> Path:
    """frontier.json beside export.json, written atomically."""
    from depthlab.rundir import atomic_write_text

    path = Path(root) / PAGE_DATA_FILE
    atomic_write_text(path, json.dumps(_finite(data), ensure_ascii=False, allow_nan=False,
                                       indent=1))
    return path
