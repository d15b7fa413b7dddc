"""A background thread that samples CPU and GPU use at a fixed rate and hands each sample to subscribers."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from types import ModuleType
from typing import Any

from workbench._validate import check_int
from workbench.monitor.readers import NvmlReader, ProcessReader, read_cpu

Sample = dict[str, Any]
_MAX_ERRORS = 100
_EDGE_S = 0.1  # the first sample comes this soon, and `stop` samples the end if the last is this old


class DeviceSampler:
    """Samples ``{"time", "cpu", "gpus"}`` every `interval` seconds on a daemon thread.

    Nothing runs until `start`; `stop` ends the thread within one interval and shuts NVML. The first sample
    comes after 0.1 s (or `interval`, if shorter) and `stop` takes one more of the time since the last, so a
    sub-second run still draws a line, not a dot (a run stopped before the first tick gets one sample,
    covering the time it ran). Samples are taken on a fixed grid, so slow reads (NVML's PCIe counters take
    20 ms each) don't stretch the period;
    ticks missed while a sample overran are skipped. Subscribers are called on the sampler thread after
    each sample; one that raises, or a reader that fails, is reported in `errors` (the last 100) and the
    sampling goes on. `cpu_seconds` is all the CPU time the thread used, waits and subscribers included.

    Args:
        interval: seconds between samples (> 0; default 0.5, i.e. 2 Hz).
        history: how many recent samples `samples()` keeps (≥ 1).
        nvml: a pynvml-like module for the GPU reader (tests pass a stand-in).

    Example:
        >>> sampler = DeviceSampler(interval=0.05)
        >>> with sampler:
        ...     time.sleep(0.2)
        >>> len(sampler.samples()) >= 1, sampler.running
        (True, False)
    """

    def __init__(self, interval: float = 0.5, history: int = 240, nvml: ModuleType | None = None) -> None:
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not (math.isfinite(interval) and interval > 0)
        ):
            raise ValueError(f"interval must be a finite number of seconds > 0, got {interval!r}")
        self.interval = float(interval)
        self._history: deque[Sample] = deque(maxlen=check_int("history", history, minimum=1))
        self._gpus = NvmlReader(nvml)
        self._process_reader = ProcessReader()
        self._ranks: Callable[[], dict[int, int]] | None = None
        self._subscribers: list[Callable[[Sample], None]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: deque[str] = deque(maxlen=_MAX_ERRORS)
        self.cpu_seconds = 0.0
        self._wall_started: float | None = None
        self._wall_seconds = 0.0

    @property
    def running(self) -> bool:
        """True while the sampling thread runs."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def wall_seconds(self) -> float:
        """Seconds the sampler has been running (all runs together)."""
        running = 0.0 if self._wall_started is None else time.perf_counter() - self._wall_started
        return self._wall_seconds + running

    @property
    def cpu_fraction(self) -> float:
        """CPU time of the sampling thread / its running time: its cost as a fraction of one core."""
        wall = self.wall_seconds
        return self.cpu_seconds / wall if wall > 0 else 0.0

    @property
    def gpu_unavailable_reason(self) -> str | None:
        """Why no GPU is sampled (no NVML), or None."""
        return self._gpus.unavailable_reason

    @property
    def latest(self) -> Sample | None:
        """The most recent sample, or None before the first."""
        with self._lock:
            return self._history[-1] if self._history else None

    def samples(self) -> list[Sample]:
        """The recent samples, oldest first (at most `history`)."""
        with self._lock:
            return list(self._history)

    def subscribe(self, callback: Callable[[Sample], None]) -> Callable[[], None]:
        """Call `callback(sample)` after each sample; returns a function that unsubscribes it."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def watch(self, ranks: Callable[[], dict[int, int]] | None) -> None:
        """Also sample each rank's process: `ranks()` gives rank → pid at each sample (a launch's workers
        change from run to run); None stops. Adds ``"processes"`` to the samples (see `ProcessReader`),
        with ``gpu_index``/``gpu_memory`` where NVML lists the process on a GPU."""
        self._ranks = ranks

    def sample_once(self) -> Sample:
        """Read CPU and GPUs now (on the calling thread), without storing or publishing."""
        sample = {"time": time.time(), "cpu": read_cpu(), "gpus": self._gpus.read()}
        if self._ranks is not None:
            processes = self._process_reader.read(self._ranks())
            on_gpus = self._gpus.process_memory() if sample["gpus"] else {}
            for process in processes:
                if process["pid"] in on_gpus:
                    process["gpu_index"], process["gpu_memory"] = on_gpus[process["pid"]]
            sample["processes"] = processes
        return sample

    def start(self) -> None:
        """Start sampling; does nothing if already running."""
        if self.running:
            return
        self._stop = threading.Event()
        self._wall_started = time.perf_counter()
        self._thread = threading.Thread(
            target=self._run, args=(self._stop,), name="workbench-sampler", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop sampling, wait for the thread (up to `timeout` s) and shut NVML."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"the sampler thread did not stop within {timeout} s")
            self._thread = None
        if self._wall_started is not None:
            self._wall_seconds += time.perf_counter() - self._wall_started
            self._wall_started = None
        self._gpus.close()

    def __enter__(self) -> DeviceSampler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self, stop: threading.Event) -> None:
        cpu_before, cpu_started = self.cpu_seconds, time.thread_time()
        try:
            read_cpu()  # prime psutil's counters so the first sample covers the time since
            edge = min(self.interval, _EDGE_S)
            due = time.monotonic() + edge
            last = None
            while not stop.wait(max(0.0, due - time.monotonic())):
                self._sample_and_publish()
                last = time.monotonic()
                self.cpu_seconds = cpu_before + time.thread_time() - cpu_started
                missed = max(0, math.floor((time.monotonic() - due) / self.interval))
                due += (missed + 1) * self.interval
            if last is None or time.monotonic() - last >= edge:
                self._sample_and_publish()  # the end of the run: the time since the last sample
        finally:
            self.cpu_seconds = cpu_before + time.thread_time() - cpu_started

    def _sample_and_publish(self) -> None:
        try:
            sample = self.sample_once()
        except Exception as error:  # e.g. a GPU fell off the bus: report it and try again next tick
            self._record_error("sample_once", error)
            return
        with self._lock:
            self._history.append(sample)
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(sample)
            except Exception as error:  # a broken view must not stop the sampling
                self._record_error(getattr(callback, "__qualname__", repr(callback)), error)

    def _record_error(self, where: str, error: Exception) -> None:
        self.errors.append(f"{where}: {type(error).__name__}: {error}")
