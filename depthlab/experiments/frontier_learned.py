"""What the trained widened-stream models learned, read from their checkpoints for the
page: the stream-mixing matrix of every hyper-connection write (hc, mhc) with its read
and write weights, and the depth weights of every attention-residual sublayer (attnres).

The mixing weights depend on the input, so they are recorded at the residual modules'
hook points on the run's fixed validation batch and averaged over batch and tokens
(an average of doubly stochastic matrices is doubly stochastic):
  mHC  `*.hook_comb` [..., n, n] (H <- comb^T H), `*.hook_pre` / `*.hook_post` [..., n];
  HC   `*.hook_alpha` [..., n, n+1] = [A_m | A_r] (the matrix is A_r; H <- A_r^T H),
       `*.hook_beta` [..., n];
  any  `*.hook_mixing` [..., n, n] (a generic name for the next design);
  AttnRes `*.hook_depth_weights` [..., k]: softmax weights over the k earlier sources.
A model without such hook points is asked for module attributes `mixing_matrix` /
`depth_weights` (tensors or methods returning one), else yields empty lists, which the
report states as such.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from depthlab.errors import UserError
from depthlab.probes import mixing
from depthlab.rundir import atomic_write_text, load_model

LEARNED_ARMS = ("hc", "mhc", "attnres")
# hook suffix -> (what it holds, how to read the averaged tensor)
MATRIX_HOOKS = {"hook_comb": lambda t: t, "hook_mixing": lambda t: t,
                "hook_alpha": lambda t: t[..., 1:]}
READ_HOOKS = {"hook_pre": lambda t: t, "hook_alpha": lambda t: t[..., 0]}
WRITE_HOOKS = {"hook_post": lambda t: t, "hook_beta": lambda t: t}
DEPTH_HOOK = "hook_depth_weights"
MIXING_ATTRS, DEPTH_ATTRS = ("mixing_matrix",), ("depth_weights",)
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


def _split(name: str) -> tuple[str, str]:
    """`blocks.0.attn_residual.hook_comb` -> ("blocks.0.attn_residual", "hook_comb")."""
    prefix, _, suffix = name.rpartition(".")
    return prefix, suffix


def _hooked(model: nn.Module, x: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """Every learned-weight hook's tensor on the batch x, averaged over batch and tokens."""
    suffixes = {*MATRIX_HOOKS, *READ_HOOKS, *WRITE_HOOKS, DEPTH_HOOK}
    names = [n for n, _ in model.named_modules() if _split(n)[1] in suffixes]
    if not names or x is None or not hasattr(model, "run_with_cache"):
        return {}
    with torch.no_grad():
        _, cache = model.run_with_cache(x, names=names)
    return {n: cache[n].float().reshape(-1, *cache[n].shape[x.dim():]).mean(0)
            for n in cache.keys()}


def read_learned(model: nn.Module, x: torch.Tensor | None = None) -> dict[str, list]:
    """{"mixing": [{"name", "matrix", "read", "write"}], "depth_weights": [{"name",
    "weights"}]} in layer order: hook points on the batch x (shaped like the model's
    input; the hooks' leading axes are the same), module attributes otherwise."""
    cached = _hooked(model, x)
    by_module: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in cached.items():
        prefix, suffix = _split(name)
        by_module.setdefault(prefix, {})[suffix] = t
    mixing, depth = [], []
    for prefix, hooks in by_module.items():
        pick = lambda table, hooks=hooks: next(
            (f(hooks[k]) for k, f in table.items() if k in hooks), None)
        matrix = pick(MATRIX_HOOKS)
        if matrix is not None and matrix.dim() == 2 and matrix.shape[0] == matrix.shape[1]:
            read, write = pick(READ_HOOKS), pick(WRITE_HOOKS)
            mixing.append((prefix, matrix, read, write))
        if DEPTH_HOOK in hooks:
            depth.append((prefix, hooks[DEPTH_HOOK]))
    if not mixing:
        mixing = [(n, m, None, None) for n, mod in model.named_modules()
                  if (m := _attr_tensor(mod, MIXING_ATTRS)) is not None
                  and m.dim() == 2 and m.shape[0] == m.shape[1]]
    if not depth:
        depth = [(n, w) for n, mod in model.named_modules()
                 if (w := _attr_tensor(mod, DEPTH_ATTRS)) is not None and w.dim() == 1]
    mixing.sort(key=lambda e: _order(e[0]))
    depth.sort(key=lambda e: _order(e[0]))
    listed = lambda t: None if t is None else t.tolist()
    return {"mixing": [{"name": n, "matrix": m.tolist(), "read": listed(r), "write": listed(w)}
                       for n, m, r, w in mixing],
            "depth_weights": [{"name": n, "weights": w.tolist()} for n, w in depth]}


def composite_gain(matrices: list[list[list[float]]]) -> float:
    """`depthlab.probes.mixing.composite_gain` of matrices read as nested lists (NaN for
    none): the mHC paper's "Amax gain magnitude" (arXiv 2512.24880, Fig. 3)."""
    if not matrices:
        return math.nan
    return mixing.composite_gain([torch.tensor(m, dtype=torch.float64) for m in matrices])


def read_run(run_dir: Path) -> dict[str, Any]:
    """The learned structures of one trained run, on its fixed validation batch."""
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
    path = Path(root) / PAGE_DATA_FILE
    atomic_write_text(path, json.dumps(_finite(data), ensure_ascii=False, allow_nan=False,
                                       indent=1))
    return path
