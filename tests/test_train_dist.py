"""torchrun with 2 CPU processes follows the single-process loss curve at the same global batch."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from depthlab.metrics import read_metrics

TEXT = str(Path(__file__).parent / "data" / "tiny_shakespeare.txt")
REPO = Path(__file__).parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DEPTHLAB_CACHE": str(tmp_path / "cache")}
    args = ["train", "--preset", "tiny", "--corpus", TEXT, "--steps", "6", "--no-progress",
            "--set", "train.log_every=1", "--set", "train.eval_every=3",
            "--set", "train.ckpt_every=3"]
    one = subprocess.run([sys.executable, "-m", "depthlab", *args, "--out", str(tmp_path / "one")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "depthlab"]
    two = subprocess.run([*launcher, *args, "--out", str(tmp_path / "two")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert two.returncode == 0, two.stderr[:3000]  # the failing rank's own message comes first
    for kind, key in (("train", "loss"), ("eval", "val_loss")):
        a = [(r["step"], r[key]) for r in read_metrics(tmp_path / "one", kind)]
        b = [(r["step"], r[key]) for r in read_metrics(tmp_path / "two", kind)]
        assert [s for s, _ in a] == [s for s, _ in b]
        assert all(abs(x - y) < 1e-4 * abs(x) for (_, x), (_, y) in zip(a, b, strict=True)), (a, b)
    assert read_metrics(tmp_path / "two", "run_start")[0]["world_size"] == 2
