"""The one reading of the residual stream (depthlab.probes.stream): known answers for
`reduce_stream` on a plain stream and on one that carries n copies (read as their sum), and one command
behind both names of the run probe."""

import math

import pytest
import torch

from depthlab.cli import build_parser
from depthlab.probes.stream import collapse, reduce_stream


def test_a_plain_stream_is_its_own_tokens_and_its_rms_is_over_every_element():
    x = torch.tensor([[[3.0, 4.0], [0.0, 0.0]]])  # [B=1, T=2, D=2]
    rms, tokens = reduce_stream(x)
    assert tokens is x
    assert rms.item() == pytest.approx(math.sqrt((9 + 16) / 4))


def test_a_wide_stream_is_read_as_the_sum_of_its_copies():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])  # copy 0: [T=2, D=2]
    b = torch.tensor([[1.0, 0.0], [0.0, -2.0]])  # copy 1
    x = torch.stack([a, b], dim=1)[None]  # [B=1, T=2, n=2, D=2]
    rms, tokens = reduce_stream(x)
    assert torch.equal(tokens, torch.tensor([[[2.0, 0.0], [0.0, 0.0]]]))  # a + b: [B, T, D]
    assert rms.item() == pytest.approx(math.sqrt(4 / 4))  # RMS of a + b


def test_collapse_of_identical_and_of_orthogonal_tokens():
    same = torch.ones(1, 4, 3, dtype=torch.float64)  # one state, 4 identical tokens
    apart = torch.eye(3, dtype=torch.float64)[None]  # one state, 3 orthogonal tokens
    assert collapse(same) == {"rel_distance": [0.0], "mean_cosine": [pytest.approx(1.0)]}
    got = collapse(apart)
    assert got["mean_cosine"] == [pytest.approx(0.0)]
    # centred rows of I_3: each |e_i - 1/3|^2 = 2/3, total 2, against |I|^2 = 3
    assert got["rel_distance"] == [pytest.approx(math.sqrt(2 / 3))]


def test_probe_run_and_hf_probe_are_one_command():
    parser = build_parser()
    home = parser.parse_args(["probe", "run", "RUN", "--ids", "1,2"])
    alias = parser.parse_args(["hf", "probe", "RUN", "--ids", "1,2"])
    assert home.handler is alias.handler
    assert vars(home) == vars(alias)
