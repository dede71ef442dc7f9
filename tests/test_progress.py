"""Progress on stderr: plain lines in a log (driven by a fake clock), a tqdm bar on a
terminal, and the trainer, experiment runner, export-page and `lab` reporting through it."""

import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from depthlab import progress as progress_mod
from depthlab.progress import Progress, format_duration

DATA = Path(__file__).parent / "data"
TEXT = str(DATA / "tiny_shakespeare.txt")
LINE = re.compile(r"^(?P<desc>.+): step (?P<done>\d+)/(?P<total>\d+) \(\d+%\), loss \d+\.\d{3}, "
                  r"[\d,]+ tokens/s(?P<all>, all \d+ runs ETA \S+)?, \S+, ETA (\S+)$")


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def log_progress(total=10, **kw):
    clock, stream = FakeClock(), io.StringIO()
    bar = Progress(total, desc="demo", stream=stream, tty=False, clock=clock, **kw)
    return bar, clock, stream


def test_a_log_gets_a_line_once_per_interval_with_step_loss_rate_and_eta():
    bar, clock, stream = log_progress(interval=30)
    for step in range(1, 11):
        clock.now += 10  # a step every 10 s: a line at 30 s, 60 s, 90 s
        bar.report(step, loss=3.0 - 0.1 * step, tokens_per_s=1234.5)
    lines = stream.getvalue().splitlines()
    assert lines == [
        "demo: step 3/10 (30%), loss 2.700, 1,234 tokens/s, 30s, ETA 1m10s",
        "demo: step 6/10 (60%), loss 2.400, 1,234 tokens/s, 1m00s, ETA 40s",
        "demo: step 9/10 (90%), loss 2.100, 1,234 tokens/s, 1m30s, ETA 10s",
    ]
    assert "\r" not in stream.getvalue()


def test_each_item_prints_every_report_and_skipped_work_does_not_speed_up_the_eta():
    bar, clock, stream = log_progress(total=4, unit="run", each_item=True)
    bar.skip(2)  # two runs were finished before: they take no time now
    clock.now += 60
    bar.report(3, run="third completed")
    assert stream.getvalue().splitlines() == [
        "demo: run 3/4 (75%), third completed, 1m00s, ETA 1m00s"]


def test_unknown_start_waits_for_a_second_report_before_an_eta():
    bar, clock, stream = log_progress(total=100, initial=None, interval=0)
    clock.now += 5
    bar.report(41, loss=1.0)  # a resumed run: steps 1-40 happened in another process
    clock.now += 5
    bar.report(51, loss=1.0)
    first, second = stream.getvalue().splitlines()
    assert first.endswith("ETA unknown")
    assert second.endswith("ETA 24s")  # 10 steps in 5 s, 49 to go: 24.5 s


def eta_seconds(line: str) -> int:
    m = re.search(r"ETA (?:(\d+)m)?(\d+)s$", line)
    return 60 * int(m.group(1) or 0) + int(m.group(2))


def test_eta_of_unequal_runs_is_their_work_left_at_the_measured_rate():
    """A depth sweep in miniature: runs of 1, 1, 2, 2, 4, 4, 8, 8 units of work, each
    taking 10 s per unit. After every run the time left is exactly the true time left;
    the mean time per run so far would say a quarter of it at half way (1 min, not 4)."""
    work = [1, 1, 2, 2, 4, 4, 8, 8]
    bar, clock, stream = log_progress(total=len(work), unit="run", each_item=True,
                                      weights=work)
    for i, w in enumerate(work, start=1):
        clock.now += 10 * w
        bar.report(i)
    lines = stream.getvalue().splitlines()
    assert [eta_seconds(line) for line in lines] == [10 * sum(work[i:]) for i in
                                                     range(1, len(work) + 1)]
    assert lines[3].startswith("demo: run 4/8 (50%)") and lines[3].endswith("ETA 4m00s")
    plain, clock, stream = log_progress(total=len(work), unit="run", each_item=True)
    for i, w in enumerate(work[:4], start=1):
        clock.now += 10 * w
        plain.report(i)
    assert stream.getvalue().splitlines()[-1].endswith("ETA 1m00s")  # runs, not work


def test_the_first_eta_is_measured_from_the_first_step_not_from_the_set_up():
    """`lab` on a loaded machine: two minutes of set-up (the corpus, torch) before the
    first run's first step, then 10 s per unit of work, in steps. From the first step
    on, the time left is exactly the true time left, during the first run and after it;
    the rate over the run with its set-up would say more than twice that."""
    work, steps = [1, 1, 2, 2, 4, 4, 8, 8], 10
    bar, clock, stream = log_progress(total=len(work), unit="run", each_item=True, weights=work)
    clock.now += 120  # set-up: no work done
    truth = 10 * sum(work)
    for run, w in enumerate(work):
        for step in range(1, steps + 1):
            clock.now += 10 * w / steps
            truth -= 10 * w / steps
            bar.within(step / steps)
            if (run, step) == (0, 1):
                assert bar.eta(clock.now) is None  # one point: no rate yet
            elif run == 0 or step < steps:
                assert bar.eta(clock.now) == pytest.approx(truth, rel=1e-9), (run, step)
        bar.report(run + 1)
    assert [eta_seconds(line) for line in stream.getvalue().splitlines()] == [
        10 * sum(work[i:]) for i in range(1, len(work) + 1)]
    assert bar.eta_text() == "ETA 0s"
    # before the rate could be measured from a step: the set-up inflates the first ETA
    old, clock, stream = log_progress(total=len(work), unit="run", each_item=True, weights=work)
    clock.now += 120 + 10 * work[0]
    old.report(1)
    assert old.eta(clock.now) > 2 * 10 * sum(work[1:])


def test_skipped_runs_of_unequal_work_do_not_count_toward_the_rate():
    bar, clock, stream = log_progress(total=4, unit="run", each_item=True, weights=[5, 1, 1, 3])
    bar.skip(1)  # the big first run was finished before
    clock.now += 10  # the second (1 unit) takes 10 s
    bar.report(2)
    assert stream.getvalue().splitlines() == ["demo: run 2/4 (50%), 10s, ETA 40s"]


@pytest.mark.parametrize("weights", [[1, 2], [1, 0, 1], [1, -1, 2]])
def test_weights_are_one_positive_number_per_item(weights):
    with pytest.raises(ValueError, match="weights: 3 positive numbers, one per run"):
        Progress(3, desc="x", unit="run", weights=weights, enabled=False)


def test_the_runner_weighs_the_depth_sweep_by_its_depths():
    from depthlab.experiments import BUDGETS, get_experiment
    from depthlab.experiments.runner import planned_work
    from depthlab.experiments.spec import base_config

    b = BUDGETS["quick"]
    specs = get_experiment("residual").grid(base_config(b), b, 1)
    first = planned_work(specs[0])
    for spec in specs:  # same steps and width: the work grows with the layers exactly
        assert planned_work(spec) / first == pytest.approx(spec.cfg.model.n_layers, rel=1e-12)
    longer = replace(specs[0].cfg, train=replace(specs[0].cfg.train, steps=2 * b.sweep_steps))
    assert planned_work(replace(specs[0], cfg=longer)) > 1.9 * first


def test_a_terminal_bar_with_weights_shows_the_weighted_eta():
    clock, stream = FakeClock(), io.StringIO()
    bar = Progress(3, desc="demo", unit="run", stream=stream, tty=True, clock=clock,
                   weights=[1, 1, 8])
    clock.now += 10
    bar.report(1)
    bar.close()
    assert "ETA 1m30s" in stream.getvalue()


def test_disabled_prints_nothing():
    bar, clock, stream = log_progress(enabled=False, interval=0)
    clock.now += 60
    bar.report(5, loss=1.0)
    assert stream.getvalue() == ""


def test_a_terminal_keeps_the_tqdm_bar():
    stream = io.StringIO()
    with Progress(10, desc="demo", stream=stream, tty=True) as bar:
        bar.report(3, loss=2.5, tokens_per_s=1000.0)
        bar.report(4, loss=2.4, tokens_per_s=1000.0)
    out = stream.getvalue()
    assert "\r" in out and "4/10" in out and "loss 2.400" in out and "ETA" not in out


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (59.4, "59s"), (60, "1m00s"),
                                           (3599, "59m59s"), (3600, "1h00m"), (7385, "2h03m")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.fixture
def every_report(monkeypatch, tmp_path):
    """A line for every report, as a 20 s interval would give on a slow run."""
    monkeypatch.setattr(progress_mod, "LOG_INTERVAL_S", 0.0)
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))


def test_trainer_prints_plain_lines_when_stderr_is_not_a_terminal(tmp_path, capsys,
                                                                  every_report):
    from depthlab.presets import tiny
    from depthlab.train import train

    cfg = tiny()
    cfg = replace(cfg, data=replace(cfg.data, corpus=TEXT), train=replace(cfg.train, steps=6))
    train(cfg, tmp_path / "run", progress=True)
    lines = capsys.readouterr().err.splitlines()
    # first the optimizer's parameter groups (one line each), then the progress lines
    assert re.match(r"AdamW: \d+ tensors, [\d,]+ weights \(", lines[0]), lines
    lines = lines[1:]
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    assert [int(m["done"]) for m in matches] == [1, 2, 3, 4, 5, 6]
    assert {m["desc"] for m in matches} == {"train run"}
    train(cfg, tmp_path / "quiet", progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_lab_logs_every_run_and_ends_with_the_conclusions(tmp_path, capsys, every_report):
    from depthlab.cli import main

    runs = tmp_path / "runs"
    assert main(["lab", "--budget", "micro", "--no-serve", "--no-real-model", "--runs", str(runs)]) == 0
    out, err = capsys.readouterr()
    step_lines = [m for m in map(LINE.match, err.splitlines()) if m]
    names = [f"L{depth}-{arm}-s0" for depth in (1, 2, 3) for arm in ("plain", "none")]  # micro grid
    assert {m["desc"] for m in step_lines} == {f"residual {i}/6 {n}" for i, n in enumerate(names, 1)}
    assert all(m["all"] for m in step_lines)  # the experiment's time left on every step line
    run_lines = [line for line in err.splitlines() if line.startswith("residual: run ")]
    assert len(run_lines) == 6 and run_lines[-1].startswith("residual: run 6/6 (100%), L3-none")
    assert all("tokens/s" in line and "ETA" in line and "val loss" in line for line in run_lines)
    export = json.loads((runs / "residual" / "export.json").read_text())
    tail = out.rstrip("\n").splitlines()[-len(export["conclusions"]):]
    assert tail == [f"  - {c['en']}" for c in export["conclusions"]]

    # Data found: no runs, the same conclusions.
    assert main(["lab", "--no-serve", "--no-real-model", "--runs", str(runs)]) == 0
    again, err = capsys.readouterr()
    assert err == "" and again.startswith("depthlab: data found")
    assert again.splitlines()[-len(tail):] == tail


def test_lab_says_which_field_of_a_broken_export_is_wrong(tmp_path, capsys):
    from depthlab.cli import main

    export = tmp_path / "residual" / "export.json"
    export.parent.mkdir()
    export.write_text(json.dumps({"experiment": "residual"}))
    assert main(["lab", "--no-serve", "--no-real-model", "--runs", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "exported_at must be a string" in err


def test_export_page_logs_one_line_per_section_without_carriage_returns(capsys, monkeypatch):
    from depthlab.web import export, sections

    monkeypatch.setattr(sections, "GRIDS", {**sections.GRIDS, "tiny": {"n": (2, 4), "g": (1.0,), "g_step": 0.5}})
    quiet = export.static_sections("tiny", progress=False)
    assert capsys.readouterr().err == ""
    assert export.static_sections("tiny", progress=True) == quiet
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    k = len(sections.SECTIONS)
    assert [line.split(", ")[0] for line in lines] == [
        f"export-page: precomputing the page's sections: section {i}/{k} ({100 * i / k:.0f}%)" for i in range(1, k + 1)]
    assert "simulate done" in lines[0] and "ETA 0s" in lines[-1]
