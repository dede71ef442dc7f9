"""The attention sink, measured one way for every model: the mean weight a query puts on
token 0, per layer (mean over heads and queries, through
`depthlab.probes.realmodel.attention_probes`), on fixed validation windows, against
uniform causal attention, H_T / T. attn-gate reads its course runs with it and sets
beside them SmolLM2-135M, a real trained model, on the same validation text tokenised by
SmolLM2's own tokenizer, in windows of as many tokens as the course runs see.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from depthlab.errors import UserError
from depthlab.experiments.wording import Text, phrase
from depthlab.rundir import CONFIG_FILE, atomic_write_text, load_model, load_tokenizer

WINDOWS = 8  # validation windows measured: the fixed batch of the training probes
SINK_RATIO = 2.0  # a sink: the first token draws more than twice its uniform share
REAL_CACHE = "smollm2-first-token.json"  # in the experiment folder: analysis re-runs fast


@dataclass(frozen=True)
class Profile:
    """First-token share per layer on windows of `tokens` tokens, and H_T / T for them."""

    layers: list[float]
    uniform: float
    tokens: int

    @property
    def share(self) -> float:
        """Over all layers and heads (each layer has the same number of heads)."""
        return sum(self.layers) / len(self.layers)

    @property
    def ratio(self) -> float:
        return self.share / self.uniform

    def to_json(self) -> dict[str, Any]:
        return {"layers": self.layers, "uniform": self.uniform, "tokens": self.tokens}


def first_token_profile(model: Any, x: Any) -> Profile:
    """The first-token profile of `model` on the windows x [B, T], one window at a time
    (SmolLM2's 30 layers of [9, 256, 256] weights for a whole batch would take 0.6 GB)."""
    import torch

    from depthlab.probes.realmodel import attention_probes

    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.cfg.n_layers)]
    per_window = []
    for row in x:
        with torch.no_grad():
            _, cache = model.run_with_cache(row[None], names=names)
        probes = attention_probes([cache[n][0].double() for n in names])
        per_window.append(probes["layer_share"])
    layers = torch.tensor(per_window, dtype=torch.float64).mean(0).tolist()
    return Profile(layers, probes["uniform"], int(x.shape[1]))


def run_profile(run_dir: Path) -> Profile:
    """A course run on its fixed validation batch (WINDOWS windows of its seq_len)."""
    import torch

    from depthlab.tokenizer import prepare_data
    from depthlab.train import batches

    model, cfg = load_model(run_dir)
    data = prepare_data(cfg.data)
    x, _ = batches.fixed_batch(data.val, WINDOWS, cfg.train.seq_len, torch.device("cpu"))
    return first_token_profile(model, x)


def validation_text(data_cfg: Any) -> str:
    """The validation split the course runs are scored on, as text."""
    from depthlab.tokenizer import prepare_data

    data = prepare_data(data_cfg)
    return data.tokenizer.decode([int(i) for i in data.val])


def model_profiles(model_dir: Path, text: str, lengths: list[int],
                   cache: Path) -> dict[int, Profile]:
    """The model of `model_dir` on `text` tokenised by its own tokenizer: WINDOWS windows
    of each length, spread over the text as the fixed batch is. Kept in `cache`, keyed by
    the model's config, the text and the window rule, so a second analysis reads it."""
    import numpy as np
    import torch

    from depthlab.train import batches

    key = {"config_sha256": _sha256((Path(model_dir) / CONFIG_FILE).read_bytes()),
           "text_sha256": _sha256(text.encode()), "windows": WINDOWS}
    stored = _read_cache(cache, key)
    missing = [t for t in lengths if str(t) not in stored]
    if missing:
        model, _ = load_model(Path(model_dir))
        tokenizer = load_tokenizer(Path(model_dir))
        if tokenizer is None:
            raise UserError(f"{model_dir} has no tokenizer.json to tokenise the text with")
        ids = np.asarray(tokenizer.encode(text), dtype=np.int64)
        for t in missing:
            x, _ = batches.fixed_batch(ids, WINDOWS, t, torch.device("cpu"))
            stored[str(t)] = first_token_profile(model, x).to_json()

        atomic_write_text(cache, json.dumps({"key": key, "profiles": stored}, indent=1))
    return {t: Profile(**stored[str(t)]) for t in lengths}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_cache(path: Path, key: dict) -> dict[str, dict]:
    """The cached profiles when they were measured with this key; a stale, broken or
    missing cache is measured again."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("key") != key:
        return {}
    profiles = data.get("profiles")
    return profiles if isinstance(profiles, dict) else {}


def smollm2_profiles(out_dir: Path, data_cfg: Any, lengths: list[int],
                     cache: Path) -> dict[int, Profile] | Text:
    """SmolLM2-135M's profiles (imported once into OUT/smollm2, as `depthlab lab` does),
    or the one sentence that says why there are none: no wheel, or an import that failed.
    The course runs' analysis does not depend on it."""
    from depthlab.hf.gguf_import import ensure_smollm2

    try:
        model_dir = ensure_smollm2(out_dir, log=lambda _msg: None, progress=False)
        if model_dir is None:
            from depthlab.hf.gguf_import import SMOLLM2_INSTALL

            return phrase("attn-gate.real.missing", install=SMOLLM2_INSTALL)
        return model_profiles(model_dir, validation_text(data_cfg), lengths, cache)
    except UserError as e:
        return phrase("attn-gate.real.failed", error=str(e))


def is_sink(share: float, uniform: float) -> bool:
    """More than SINK_RATIO times the first token's share under uniform causal attention."""
    return math.isfinite(share) and share > SINK_RATIO * uniform
