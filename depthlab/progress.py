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
the first, smallest runs' rate per run would promise a fraction of the real time.
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
        self._base: tuple[int, float] | None = None  # (count, time) the rate is measured from
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
            self._base = (self.done, now)

    def skip(self, done: int) -> None:
        """`done` units were already finished (a resumed run, a finished run skipped):
        they move the count, not the rate the time left is estimated from."""
        self.done = done
        if self.bar is not None:
            self.bar.n = self.bar.last_print_n = done
            self.bar.refresh()
        if self.as_lines or self.bar is not None:
            self._base = (done, self.clock())

    def report(self, done: int, **stats: object) -> None:
        """`done` units are finished; `stats` (loss=, tokens_per_s=, a label) go beside it."""
        self.done = done
        now = self.clock()
        if self._base is None and (self.as_lines or self.bar is not None):
            self._base = (done, now)  # the count before the first report is unknown
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
        eta = self.eta(now)
        parts.append(f"ETA {format_duration(eta)}" if eta is not None else "ETA unknown")
        return ", ".join(p for p in parts if p)

    def eta(self, now: float) -> float | None:
        """Seconds left: the work left at the rate measured since the base point (work
        done / time taken); None before any progress."""
        if self._base is None:
            return None
        base_done, base_t = self._base
        if self.done <= base_done or now <= base_t:
            return None if self.done < self.total else 0.0
        work = self.work or range(self.total + 1)
        left, done = work[self.total] - work[self.done], work[self.done] - work[base_done]
        return left * (now - base_t) / done

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
