"""Coalesce frequent "something changed" signals into at most a few redraws per second on a timer thread.

The thread that signals (a training loop, a sampler) only sets a flag; a small daemon thread calls the
redraw. The thread starts on demand and ends after a quiet spell or on `Throttle.stop`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from workbench._validate import check_positive


class Throttle:
    """Calls `push` at most `max_per_s` times per second, from a timer thread, after `poke` says so.

    `poke` is O(1) and takes no lock in the steady state, so it is safe to call on every training step.
    `push` runs on the timer thread, or on the caller of `flush`; it must do its own locking if the
    caller of `flush` and the timer can race (both may push at once).

    Args:
        push: draws the latest state; called with no arguments.
        max_per_s: the most `push` calls per second from the timer (> 0).
        idle_s: the timer thread ends after this many seconds without a `poke`.

    Example:
        >>> calls = []
        >>> throttle = Throttle(lambda: calls.append(1), max_per_s=4)
        >>> for _ in range(1000):
        ...     throttle.poke()
        >>> throttle.stop()
        >>> throttle.flush()  # what the timer had not drawn yet, now, on this thread
        >>> 1 <= len(calls) <= 2
        True
    """

    def __init__(self, push: Callable[[], None], max_per_s: float, idle_s: float = 5.0) -> None:
        self.interval = 1.0 / check_positive("max_per_s", max_per_s)
        self.idle_s = check_positive("idle_s", idle_s)
        self._push = push
        self._dirty = False
        self._lock = threading.Lock()
        self._timer: tuple[threading.Thread, threading.Event] | None = None

    @property
    def running(self) -> bool:
        """True while the timer thread runs."""
        return self._timer is not None

    def poke(self) -> None:
        """Something changed: push within one interval (starts the timer thread if it is not running)."""
        self._dirty = True  # set before reading _timer: pairs with the idle check in _run
        if self._timer is None:
            self.start()

    def start(self) -> None:
        """Start the timer thread now (so the first `poke` of a run does not pay for it); no-op if running."""
        with self._lock:
            if self._timer is not None:
                return
            stop = threading.Event()
            thread = threading.Thread(target=self._run, args=(stop,), name="workbench-throttle", daemon=True)
            self._timer = (thread, stop)
            thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """End the timer thread (an unpushed change stays pending: `flush` draws it)."""
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            thread, stop = timer
            stop.set()
            if thread is not threading.current_thread():
                thread.join(timeout)

    def flush(self) -> None:
        """Push now on this thread if anything changed since the last push."""
        if self._dirty:
            self._dirty = False
            self._push()

    def _run(self, stop: threading.Event) -> None:
        quiet = 0.0
        try:
            while not stop.wait(self.interval):
                if self._dirty:
                    quiet = 0.0
                    self.flush()
                    continue
                quiet += self.interval
                if quiet >= self.idle_s:
                    break
        finally:
            with self._lock:
                ours = self._timer is not None and self._timer[1] is stop
                if ours:
                    self._timer = None
        # A poke that still saw this timer relies on it, so push what it marked; a later poke starts a new
        # timer (clearing _timer before reading _dirty is what makes one of the two always happen).
        if ours:
            self.flush()
