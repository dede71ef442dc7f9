"""The race on nanoGPT's ground (bench/race.py, depthlab.experiments.speedrun_text): the
text is cut where nanoGPT cuts it, every contender is scored on the same windows, the
crossing is the first evaluation at or below the target, and bad input is one line."""

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from depthlab.errors import UserError
from depthlab.experiments import speedrun_text as st
from depthlab.tokenizer import prepare_data

ROOT = Path(__file__).resolve().parents[1]
TEXT = "".join(f"line {i}: the quick brown fox jumps over a lazy dog {i * i}\n" for i in range(60))


def test_split_is_nanogpts_first_90_percent_and_vocabulary_of_the_whole_text():
    text = TEXT + "Zq"  # characters only the validation part holds are in the vocabulary
    s = st.nanogpt_split(text)
    cut = int(len(text) * 0.9)  # prepare.py: train_data = data[:int(n*0.9)]
    assert len(s.train) == cut and len(s.val) == len(text) - cut
    assert s.chars == tuple(sorted(set(text))) and "Z" in s.chars and "Z" not in text[:cut]
    decoded = "".join(s.chars[i] for i in np.concatenate([s.train, s.val]))
    assert decoded == text


def test_the_race_cache_gives_the_trainer_nanogpts_cut_not_its_own(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(TEXT, encoding="utf-8")
    s = st.nanogpt_split(TEXT)
    from depthlab.corpus import load_corpus
    data_cfg = st.write_cache(tmp_path / "cache", str(path), load_corpus(str(path)).sha256, s)
    data = prepare_data(data_cfg, tmp_path / "cache")
    assert data.from_cache
    assert np.array_equal(data.train, s.train) and np.array_equal(data.val, s.val)
    own = prepare_data(data_cfg, tmp_path / "own")  # depthlab's cut: n - int(0.1 n)
    assert len(own.train) == len(TEXT) - int(len(TEXT) * 0.1) != len(s.train)


def test_windows_are_fixed_in_range_and_the_same_for_every_contender():
    a, b = st.fixed_windows(5000), st.fixed_windows(5000)
    assert np.array_equal(a, b) and len(a) == st.WINDOWS == 256
    assert a.min() >= 0 and a.max() + st.WINDOW + 1 <= 5000
    assert not np.array_equal(a, st.fixed_windows(5000, seed=1))
    val = np.arange(5000) % 61
    x, y = st.window_batch(val, a)
    assert x.shape == y.shape == (256, 64)
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x one character on


def test_score_is_nats_per_character():
    class Uniform(torch.nn.Module):
        def forward(self, x):
            return torch.zeros(*x.shape, 7)
    val = np.arange(400) % 7
    x, y = st.window_batch(val, st.fixed_windows(400, count=10, length=8), 8)
    assert st.score(Uniform(), x, y) == pytest.approx(math.log(7))


def test_crossing_is_the_first_evaluation_at_or_below_the_target():
    evals = [(30, 3.0, 1.95), (10, 1.0, 2.5), (40, 4.0, 1.90), (50, 5.0, 1.80), (20, 2.0, 2.1)]
    c = st.crossing(evals, 1.90)
    assert (c.step, c.cpu_s, c.loss) == (40, 4.0, 1.90)  # at counts, in step order
    assert (c.last_step, c.last_loss) == (50, 1.80)
    never = st.crossing(evals, 1.5)
    assert never.step is None and never.cpu_s is None and never.last_step == 50


def test_schedule_scores_coarsely_far_from_the_target_and_finely_near_it():
    when = st.Schedule(10, 50, 0.15, 1.9)
    assert [s for s in range(1, 101) if when.due(s)] == [50, 100]
    when.scored(2.3)
    assert not when.due(60)
    when.scored(2.0)  # within 0.15
    assert when.due(60) and when.resolution == 10
    jump = st.Schedule(10, 50, 0.15, 1.9)
    jump.scored(1.85)  # below the target at the first, coarse, score
    assert jump.resolution == 50


def test_nanogpt_lr_is_its_get_lr():
    lr = [st.nanogpt_lr(i, 1e-3, 1e-4, 100, 3000) for i in (0, 99, 100, 1550, 3000, 3001)]
    assert lr[0] == pytest.approx(1e-3 / 101) and lr[1] == pytest.approx(1e-3 * 100 / 101)
    assert lr[2] == pytest.approx(1e-3) and lr[3] == pytest.approx(5.5e-4)
    assert lr[4] == pytest.approx(1e-4) and lr[5] == 1e-4


def test_bad_text_and_target_are_one_line(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        st.read_text(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(UserError, match="empty file"):
        st.read_text(tmp_path / "empty.txt")
    with pytest.raises(UserError, match="needs at least 641"):
        st.nanogpt_split("x" * 640)
    st.nanogpt_split("x" * 641)  # its last part holds 65 characters: one window
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(UserError, match="--target"):
            st.check_target(bad)


def bench_main(argv, monkeypatch):
    """bench/race.py's main() run in this process with argv; returns its exit message."""
    spec = importlib.util.spec_from_file_location("race_bench", ROOT / "bench" / "race.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(sys, "argv", ["race.py", *argv])
    with pytest.raises(SystemExit) as e:
        bench.main()
    return str(e.value.code)


@pytest.mark.parametrize("args, says", [
    (["--text", "EMPTY"], "--text {tmp}/empty.txt: empty file"),
    (["--text", "SHORT"], "--text {tmp}/short.txt: 100 characters; the race needs at least 641"),
    (["--target", "0"], "--target 0.0: must be a loss above 0"),
    (["--target", "-1.5"], "--target -1.5: must be a loss above 0"),
    (["--presets", "nope"], "unknown preset 'nope'"),
    (["--jobs", "0"], "--jobs 0: must be at least 1"),
])
def test_the_bench_refuses_bad_input_in_one_line(tmp_path, monkeypatch, args, says):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "short.txt").write_text("y" * 100)
    files = {"EMPTY": "empty.txt", "SHORT": "short.txt"}
    args = [str(tmp_path / files[a]) if a in files else a for a in args]
    message = bench_main(args, monkeypatch)
    assert message.startswith("error: ") and "\n" not in message
    assert says.format(tmp=tmp_path) in message


@pytest.mark.slow
def test_the_bench_run_as_a_command_prints_one_line_and_no_traceback(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "race.py"), "--text",
                        str(tmp_path / "missing.txt")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr == f"error: --text {tmp_path}/missing.txt: no such file\n"


def load_bench():
    spec = importlib.util.spec_from_file_location("race_bench", ROOT / "bench" / "race.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.slow
def test_contenders_stop_at_the_target_and_count_only_their_steps(tmp_path):
    """A preset trained by depthlab's trainer and the reference loop, each on the race's
    cut of a small text: a target reached at the first score stops the run there, one
    never reached lets it train to the end, and the CPU time is that of the steps."""
    bench = load_bench()
    path = tmp_path / "t.txt"
    path.write_text(TEXT * 3, encoding="utf-8")
    from depthlab.corpus import load_corpus
    s = st.nanogpt_split(TEXT * 3)
    st.write_cache(tmp_path / "cache", str(path), load_corpus(str(path)).sha256, s)
    job = {"contender": "tiny", "seed": 0, "text": str(path), "corpus": str(path),
           "eval_every": 2, "ref_iters": 6, "cache": str(tmp_path / "cache"),
           "work": str(tmp_path)}
    reached = bench.run_preset({**job, "target": 50.0})
    assert [e[0] for e in reached["evals"]] == [10] and reached["steps"] == 10
    assert reached["resolution"] == 10 and 0 < reached["evals"][0][1] == reached["cpu_total"]
    assert not torch.nn.modules.module._global_forward_pre_hooks  # the model taker is gone
    never = bench.run_preset({**job, "target": 0.01, "work": str(tmp_path / "b")})
    assert [e[0] for e in never["evals"]] == [10, 20, 30] and never["steps"] == 30
    assert st.crossing([tuple(e) for e in never["evals"]], 0.01).step is None
    ref = bench.run_reference({**job, "contender": "reference", "target": 0.01})
    assert [e[0] for e in ref["evals"]] == [6] and ref["steps"] == 6 and ref["cpu_total"] > 0
