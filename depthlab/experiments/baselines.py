"""The losses a model is compared with, scored on exactly the tokens the model is
scored on: the validation windows of `batches.eval_offsets`, every window's next-token
targets.

unigram: each token from its add-one-smoothed frequency in the train split (what a
  model that ignores the input can reach at best, on these tokens);
bigram: each token from the one before it, P(b | a) = (c(a b) + 1) / (c(a) + V) with
  train-split counts (what one token of context buys).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from depthlab.config import Config
from depthlab.experiments.report import mean, spread
from depthlab.tokenizer import prepare_data

# A run has left the plateau when its loss is below the unigram level by more than its
# seed spread and more than this share of the unigram-bigram distance (what one token of
# context buys). Measured on Shakespeare (quick sweep, 200 steps): the stuck models without
# residual (2-8 layers) end 0.2% of that distance above the unigram level, the 1-layer one
# 116% below it; at 500 steps the 2-layer model that escapes late ends about 25% below.
PLATEAU_MARGIN = 0.05


@dataclass(frozen=True)
class Baselines:
    unigram: float
    bigram: float
    tokens: int  # how many target tokens both were scored on
    windows: int
    val_tokens: int  # the size of the val split the windows are spread over

    def to_json(self) -> dict:
        return {"unigram": self.unigram, "bigram": self.bigram, "tokens": self.tokens,
                "windows": self.windows, "val_tokens": self.val_tokens,
                "scored_on": "the validation windows every model of the experiment is scored "
                             "on: evenly spaced over the whole val split",
                "smoothing": "add-one, from train-split counts"}


def eval_pairs(val: np.ndarray, cfg: Config) -> tuple[np.ndarray, np.ndarray, int]:
    """(previous token, target) of every scored position, and the number of windows."""
    from depthlab.train.batches import eval_offsets

    offsets, length = eval_offsets(len(val), cfg.train.seq_len, cfg.train.eval_tokens)
    idx = (offsets[:, None] + np.arange(length)[None, :]).ravel()
    val = np.asarray(val, dtype=np.int64)
    return val[idx], val[idx + 1], len(offsets)


def ngram_losses(train: np.ndarray, prev: np.ndarray, target: np.ndarray,
                 vocab: int) -> tuple[float, float]:
    """Mean unigram and bigram negative log-likelihood (nats) of `target`."""
    train = np.asarray(train, dtype=np.int64)
    counts = np.bincount(train, minlength=vocab).astype(np.float64)
    unigram = -np.log((counts[target] + 1) / (counts.sum() + vocab)).mean()
    pairs = np.sort(train[:-1] * vocab + train[1:])  # every (a, b) of the train split as a*V+b
    wanted = prev * vocab + target
    pair_counts = np.searchsorted(pairs, wanted, "right") - np.searchsorted(pairs, wanted, "left")
    context = np.bincount(train[:-1], minlength=vocab).astype(np.float64)
    bigram = -np.log((pair_counts + 1) / (context[prev] + vocab)).mean()
    return float(unigram), float(bigram)


def baselines(cfg: Config) -> Baselines:
    """Both baselines for the data and evaluation settings of `cfg` (tokenised corpora
    come from the cache)."""
    data = prepare_data(cfg.data)
    prev, target, windows = eval_pairs(data.val, cfg)
    unigram, bigram = ngram_losses(data.train, prev, target, data.vocab_size)
    return Baselines(unigram, bigram, len(target), windows, len(data.val))


def seed_margin(base: Baselines) -> float:
    """How far below the unigram level one seed must end: PLATEAU_MARGIN of the
    unigram-bigram distance, in nats."""
    return PLATEAU_MARGIN * (base.unigram - base.bigram)


def plateau_margin(values: list[float], base: Baselines) -> float:
    """The margin for a seed mean: the seed margin, or the seeds' spread if larger."""
    return max(spread(values), seed_margin(base))


def left_plateau(values: list[float], base: Baselines) -> bool:
    """The rule for a seed mean: below the unigram level by more than plateau_margin."""
    return mean(values) < base.unigram - plateau_margin(values, base)


def seeds_left(values: list[float], base: Baselines) -> int:
    """The rule applied to each seed alone: how many end below the unigram level by more
    than the seed margin (a diverged seed, None or nan, does not)."""
    return sum(1 for v in values if v is not None and v < base.unigram - seed_margin(base))
