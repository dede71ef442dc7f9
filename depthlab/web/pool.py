"""Heavy work on a few threads of its own, with a queue limit; cheap requests beside it.

FastAPI runs a plain `def` endpoint on anyio's shared threadpool, 40 threads for the
whole process. When every probe ran there, a burst of 100 probe POSTs took all 40 (each
waiting for the one compute lock) and a `GET /api/meta` sent as the burst began waited
56-127 s for a thread; 40 threads each touching torch also left 40 malloc arenas behind
(RSS 471 MB -> 1.86 GB, kept when idle). So the computations go through `HeavyPool`:

- `workers` threads of their own (default 1: one core, as the one lock gave before), so
  the shared threadpool stays free for the cheap routes (meta, static files, files read
  from disk, answers already cached) and torch only ever runs on these threads;
- at most `workers + queue` jobs admitted (running or waiting); past that the request
  is refused at once with 503 and `Retry-After` (`Busy`, answered by the app in the
  request's language) instead of holding a connection and its memory for minutes;
- when the last admitted job ends, glibc is asked to give its free heap back to the
  system (`malloc_trim`), so a burst's peak does not stay resident while idle.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

WORKERS = 1  # one core for the page's probes, what `depthlab serve` asks of a laptop
QUEUE = 16  # jobs that may wait; the page sends one at a time, so only a script gets past it
MAX_WORKERS, MAX_QUEUE = 64, 4096  # what `depthlab serve` accepts


class Busy(Exception):
    """Every worker is busy and the queue is full: answered 503 with Retry-After."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"busy: retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


def _libc_trim() -> Callable[[], Any] | None:
    """glibc's malloc_trim(0), or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _libc_trim()


def release_memory() -> None:
    """Hand the C heap's free pages back to the system (what a burst left behind)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class HeavyPool:
    """`workers` threads and a queue limit for the server's computations (module docstring).

    `run(fn, *args)` is awaited by an async endpoint: it raises `Busy` at once when
    `workers + queue` jobs are already admitted. A job counts until it has finished on its
    thread, even if its client has gone, so the limit bounds the work really pending."""

    def __init__(self, workers: int = WORKERS, queue: int = QUEUE) -> None:
        if workers < 1 or queue < 0:
            raise ValueError(f"workers must be >= 1 and queue >= 0, got {workers} and {queue}")
        self.workers = workers
        self.queue = queue
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="depthlab-heavy")
        self._lock = threading.Lock()
        self._admitted = 0
        self._seconds = 1.0  # a running mean of a job's wall time, for Retry-After

    @property
    def admitted(self) -> int:
        """Jobs running or waiting now."""
        return self._admitted

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Admit `fn(*args)` onto the workers, or raise Busy past the queue limit."""
        with self._lock:
            if self._admitted >= self.workers + self.queue:
                raise Busy(self.retry_after_s())
            self._admitted += 1
        try:
            future = self._executor.submit(self._timed, fn, *args)
        except BaseException:
            self._finished()
            raise
        future.add_done_callback(lambda _: self._finished())
        return future

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on a worker, awaited without holding a thread of the shared pool."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    def retry_after_s(self) -> int:
        """Seconds until the queue has room for one more job, about: until one of the
        running jobs ends, at the mean time a job has taken; at least 1."""
        return max(1, math.ceil(self._seconds / self.workers))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _timed(self, fn: Callable[..., T], *args: Any) -> T:
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self._seconds = 0.8 * self._seconds + 0.2 * (time.perf_counter() - start)

    def _finished(self) -> None:
        with self._lock:
            self._admitted -= 1
            idle = self._admitted == 0
        if idle:
            release_memory()
