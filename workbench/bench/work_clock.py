"""What side work costs a run: time inside chosen callbacks on the training thread, and the CPU time of the
Python threads that start and end while the run goes (a logger's sender, TensorBoard's writer).

Wall-clock ratios between runs of a few seconds move by ±10% on a shared machine, far more than a 1% cost;
this clock measures the side work itself, to the microsecond.

Example:
    >>> import threading
    >>> from workbench.train.events import Callback
    >>> clock = WorkClock()
    >>> [callback] = clock.clocked([Callback()])
    >>> with clock.threads():
    ...     callback.on_step({"step": 1})
    ...     worker = threading.Thread(target=sum, args=(range(10_000),))
    ...     worker.start()
    ...     worker.join()
    >>> clock.callbacks_s > 0 and clock.threads_cpu_s > 0
    True
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from workbench.train.events import Callback, Event


class WorkClock:
    """Adds up seconds spent in clocked callbacks (`callbacks_s`, wall time on the calling thread; of which
    `fit_edges_s` in ``on_fit_start`` and ``on_fit_end``) and the CPU seconds of threads started and ended
    inside `threads()` (`threads_cpu_s`)."""

    def __init__(self) -> None:
        self.callbacks_s = 0.0
        self.fit_edges_s = 0.0
        self.threads_cpu_s = 0.0
        self._lock = threading.Lock()

    def clocked(self, callbacks: list[Callback]) -> list[Callback]:
        """The same callbacks, each forwarding its events through this clock."""
        return [_Clocked(callback, self) for callback in callbacks]

    @contextmanager
    def threads(self) -> Iterator[None]:
        """Inside the block, every Python thread that ends adds its whole CPU time to `threads_cpu_s`.

        It wraps `threading.Thread`'s bootstrap for the block (a benchmark's tool, not for library code);
        where that hook is missing (another Python), `threads_cpu_s` stays NaN.
        """
        bootstrap = getattr(threading.Thread, "_bootstrap_inner", None)
        if bootstrap is None:
            self.threads_cpu_s = float("nan")
            yield
            return
        clock = self

        def measured(thread: threading.Thread) -> None:
            try:
                bootstrap(thread)
            finally:
                with clock._lock:
                    clock.threads_cpu_s += time.thread_time()

        threading.Thread._bootstrap_inner = measured  # type: ignore[attr-defined]
        try:
            yield
        finally:
            threading.Thread._bootstrap_inner = bootstrap  # type: ignore[attr-defined]


class _Clocked(Callback):
    def __init__(self, callback: Callback, clock: WorkClock) -> None:
        self.callback = callback
        self.clock = clock

    def _timed(self, method: str, event: Event) -> None:
        started = time.perf_counter()
        try:
            getattr(self.callback, method)(event)
        finally:
            seconds = time.perf_counter() - started
            self.clock.callbacks_s += seconds
            if method in ("on_fit_start", "on_fit_end"):
                self.clock.fit_edges_s += seconds

    def on_fit_start(self, info: Event) -> None:
        self._timed("on_fit_start", info)

    def on_step(self, metrics: Event) -> None:
        self._timed("on_step", metrics)

    def on_eval(self, metrics: Event) -> None:
        self._timed("on_eval", metrics)

    def on_fit_end(self, summary: Event) -> None:
        self._timed("on_fit_end", summary)
