"""What the training tests share: the tiny corpus, a tiny config that logs every step, and a
corpus cache of each test's own (so no test reads another's tokenised text)."""

from dataclasses import replace
from pathlib import Path

import pytest

from depthlab.config import Config
from depthlab.presets import tiny

DATA = Path(__file__).parent / "data"
TEXT = str(DATA / "tiny_shakespeare.txt")
REPO = Path(__file__).parent.parent


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))


def config(**train) -> Config:
    """The tiny preset on the tiny corpus, logging every step; `train` overrides TrainConfig."""
    cfg = tiny()
    return replace(cfg, data=replace(cfg.data, corpus=TEXT),
                   train=replace(cfg.train, **{"log_every": 1, **train}))
