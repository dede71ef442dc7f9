"""bench/gpu.py without a GPU: one line, exit 0; its arguments; and its training step at
toy sizes on the CPU, so the GPU path runs code that has run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).parent.parent
sys.path.insert(0, str(REPO / "bench"))
import gpu  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with a GPU measures instead")
def test_no_gpu_is_one_line_and_exit_0():
    done = subprocess.run(["bash", str(REPO / "bench" / "gpu.sh")], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [
        "bench/gpu: no CUDA device here; nothing measured (the GPU path stays unmeasured)"]


def test_arguments():
    assert gpu.parse([]).steps == 30 and not gpu.parse([]).no_compile
    with pytest.raises(SystemExit):
        gpu.parse(["--steps", "0"])
    with pytest.raises(SystemExit):
        gpu.parse(["--device", "tpu"])


def test_peak_table_and_flops():
    assert gpu.datasheet_peak("NVIDIA H100 PCIe") == 756e12
    assert gpu.datasheet_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu.datasheet_peak("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu.datasheet_peak("Some GPU") is None
    m, _, seq = gpu.shapes(small=False)["GPT-2-shaped"]
    from depthlab.model import Transformer
    with torch.device("meta"):
        n = sum(p.numel() for p in Transformer(m).parameters())
    assert 123e6 < n < 126e6  # GPT-2 small
    # 6 x (weights but the embedding table, which a token only looks up, plus the tied head)
    assert gpu.flops_per_token(m, n, seq) == 6 * n + 12 * 12 * seq * 768 - 6 * 1024 * 768


def test_small_cpu_run_prints_both_models(capsys):
    assert gpu.main(["--device", "cpu", "--small", "--steps", "1", "--no-compile"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and "GPT-2-shaped" in out[1] and "course-shaped" in out[2]
    assert all("tokens/s, MFU" in line for line in out[1:])
