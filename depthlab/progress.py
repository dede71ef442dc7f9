"""Progress of long work on stderr, readable both live and in a log file.

On a terminal it is a tqdm bar. When stderr is not a terminal (`depthlab lab > log
2>&1`, CI, nohup) a bar's carriage returns run together, so it prints plain lines
instead: one at least every `interval` seconds while work goes on, and one per finished
item for coarse units (a run of an experiment, a depth of the page's grid). Each line
says where the work is, the latest figures (loss, tokens/s) and the time left:

    residual 2/4 residual-4L-s1: step 120/300 (40%), loss 2.314, 5,432 tokens/s, 1m02s, ETA 1m33s

The trainer, the experiment runner and export-page all report through `Progress`.
Items of unequal cost (the runs of a depth sweep: 1 to 12 layers) get `weights`, their
planned work, and the time left is the work left at the rate measured on the work done:
the first, smallest runs' rate per run would promise a fraction of the real time. An
item's own progress (`within`: a run's steps) both moves the work done and sets where
the rate is measured from: the first run's first step, not the start, so one-time
set-up (reading the corpus, importing torch) is not charged to every run still to come.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

# Seconds between plain lines: under the 30 s a log reader should ever wait, with room
# for a slow step (a report only happens when a step ends).
LOG_INTERVAL_S = 20.0


def format_duration(seconds: float) -> str:
    """12s, 3m05s, 1h02m."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_stats(stats: dict[str, object]) -> str:
    """loss, tokens_per_s and val_loss get their units; anything else prints as it is."""
    parts = []
    for key, value in stats.items():
        if value is None:
            continue
        if key == "tokens_per_s":
            parts.append(f"{value:,.0f} tokens/s")
        elif isinstance(value, float):
            parts.append(f"{key.replace('_', ' ')} {value:.3f}")
        else:
            parts.append(str(value))
    return ", ".join(parts)


class Progress:
    """`total` units of work (`unit`: step, run, ...) reported by absolute count.

    enabled=False shows nothing (--no-progress). each_item=True prints a plain line
    for every report (coarse units); otherwise at most one per `interval` seconds
    (default LOG_INTERVAL_S, read when the bar is made). initial=None: the count at
    the start is unknown (a run resumed inside train()); the rate starts at the first report.
    weights: the planned work of each item, in any unit (the runner: FLOPs of a run),
    so the ETA is work left / work done since the base point x the time that took.
    `stream`, `tty`, `clock` and `interval` are there so tests can drive it.
    """

    def __init__(self, total: int, *, desc: str, unit: str = "step", initial: int | None = 0,
                 enabled: bool = True, each_item: bool = False, leave: bool = True,
                 stream: TextIO | None = None, tty: bool | None = None,
                 interval: float | None = None, weights: Sequence[float] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        if weights is not None and (len(weights) != total or min(weights, default=1) <= 0):
            raise ValueError(f"weights: {total} positive numbers, one per {unit}")
        # work[i]: the work of the first i items (i items when no weights are given)
        self.work = [0.0, *itertools.accumulate(weights)] if weights is not None else None
        self.stream = stream if stream is not None else sys.stderr
        self.each_item, self.clock = enabled and each_item, clock
        self.interval = LOG_INTERVAL_S if interval is None else interval
        self.done = initial or 0
        self.bar = None
        self.as_lines = False
        # (work done, time) the rate is measured from; None: nothing measured yet
        self._base: tuple[float, float] | None = None
        self._within = 0.0  # the share of the item in progress that is done (`within`)
        self._rebase = True  # the next `within` sets the base: the set-up before it is not work
        if not enabled:
            return
        if tty if tty is not None else _isatty(self.stream):
            from tqdm import tqdm

            # with weights, tqdm's own remaining time (items left at the mean item's time)
            # is replaced by ours, written beside the figures
            fmt = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]" if self.work else None
            self.bar = tqdm(total=total, initial=self.done, desc=desc, unit=unit, leave=leave,
                            dynamic_ncols=True, file=self.stream, bar_format=fmt)
        else:
            self.as_lines = True
        now = clock()
        self._started = self._last_line = now
        if initial is not None:
            self._base = (self._work(self.done), now)

    def skip(self, done: int) -> None:
        """`done` units were already finished (a resumed run, a finished run skipped):
        they move the count, not the rate the time left is estimated from."""
        self.done, self._within, self._rebase = done, 0.0, True
        if self.bar is not None:
            self.bar.n = self.bar.last_print_n = done
            self.bar.refresh()
        if self.as_lines or self.bar is not None:
            self._base = (self._work(done), self.clock())

    def within(self, fraction: float) -> None:
        """The item in progress (the one after `done`) is `fraction` done (a run at step
        k of n: k / n). The first call after the start or a `skip` is where the rate is
        measured from, so the time before it (set-up, the first step) counts as no work;
        it prints nothing (the item's own bar does)."""
        self._within = min(max(fraction, 0.0), 1.0)
        if self._rebase and (self.as_lines or self.bar is not None):
            self._base, self._rebase = (self._at(), self.clock()), False

    def report(self, done: int, **stats: object) -> None:
        """`done` units are finished; `stats` (loss=, tokens_per_s=, a label) go beside it."""
        self.done, self._within, self._rebase = done, 0.0, False
        now = self.clock()
        if self._base is None and (self.as_lines or self.bar is not None):
            self._base = (self._work(done), now)  # the count before the first report is unknown
        if self.bar is not None:
            text = format_stats(stats)
            if self.work:
                eta = self.eta(now)
                text = ", ".join(p for p in (text, "ETA " + (
                    "unknown" if eta is None else format_duration(eta))) if p)
            if text:
                self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(done - self.bar.n)
        if not self.as_lines:
            return
        if self.each_item or now - self._last_line >= self.interval:
            self._last_line = now
            self._emit(self.line(now, stats))

    def line(self, now: float, stats: dict[str, object]) -> str:
        head = f"{self.desc}: {self.unit} {self.done}/{self.total}"
        if self.total:
            head += f" ({100 * self.done / self.total:.0f}%)"
        parts = [head, format_stats(stats), format_duration(now - self._started)]
        parts.append(self.eta_text(now))
        return ", ".join(p for p in parts if p)

    def eta_text(self, now: float | None = None) -> str:
        """"ETA 3m05s", or "ETA unknown" before any work is measured."""
        eta = self.eta(self.clock() if now is None else now)
        return f"ETA {format_duration(eta)}" if eta is not None else "ETA unknown"

    def eta(self, now: float) -> float | None:
        """Seconds left: the work left at the rate measured since the base point (work
        done / time taken); None before any progress."""
        if self._base is None:
            return None
        base_work, base_t = self._base
        at = self._at()
        if at <= base_work or now <= base_t:
            return None if self.done < self.total else 0.0
        return (self._work(self.total) - at) * (now - base_t) / (at - base_work)

    def _work(self, items: int) -> float:
        """The planned work of the first `items` items (their count without weights)."""
        return self.work[items] if self.work else float(items)

    def _at(self) -> float:
        """The work done: the finished items' and the share `within` gave of the next one."""
        if self._within and self.done < self.total:
            return self._work(self.done) + self._within * (self._work(self.done + 1) - self._work(self.done))
        return self._work(self.done)

    def _emit(self, text: str) -> None:
        sys.stdout.flush()  # keep order with what stdout printed before, when both go to a log
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.as_lines = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or file-like stream
        return False
