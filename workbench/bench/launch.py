"""What each way of starting `launch`'s workers costs: fork, the fork server, spawn, side by side.

    workbench bench launch                 # 2 workers, 5 alternating repeats, medians and ranges

Each sample is one whole ``launch(fn, 2)`` of a function that returns at once: start the workers, join a
gloo group, run, hand rank 0's value back, leave. The fork server's first launch in a process also starts
the server (which imports torch once); that cost is shown on its own line. ``fork`` is measured here only
because this process runs no torch ops first: in a notebook that did, a forked worker may hang (see
`workbench.parallel.launching.launcher`), which is why the fork server is the default.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from workbench._validate import check_int
from workbench.parallel.launching.launcher import START_METHODS, launch
from workbench.tables import text_table


@dataclass(frozen=True)
class LaunchBenchmark:
    """Seconds per launch for each start method (every repeat), and the fork server's first launch."""

    nprocs: int
    seconds: dict[str, tuple[float, ...]]
    first_forkserver_s: float | None  # None: this process had started its fork server already

    def median(self, method: str) -> float:
        return statistics.median(self.seconds[method])

    def table(self) -> str:
        fastest = min(self.median(m) for m in self.seconds)
        rows = []
        if self.first_forkserver_s is not None:
            rows.append(
                ["forkserver, first launch (starts the server)", f"{self.first_forkserver_s:.2f} s", ""]
            )
        for method, samples in self.seconds.items():
            rows.append(
                [
                    f"{method}",
                    f"{self.median(method):.2f} s ({min(samples):.2f}–{max(samples):.2f})",
                    f"{self.median(method) / fastest:.2f}×",
                ]
            )
        return text_table(
            [f"start of {self.nprocs} workers", "seconds per launch (range)", "vs fastest"], rows
        )


def benchmark_launch(*, nprocs: int = 2, repeats: int = 5) -> LaunchBenchmark:
    """Time `repeats` launches per start method, alternating the methods (see the module docstring)."""
    check_int("nprocs", nprocs, minimum=1)
    check_int("repeats", repeats, minimum=1)
    first = timed_launch("forkserver", nprocs)  # starts the server, or reuses one already running
    seconds: dict[str, list[float]] = {method: [] for method in START_METHODS}
    for _ in range(repeats):
        for method in START_METHODS:
            seconds[method].append(timed_launch(method, nprocs))
    started_here = first > 1.5 * statistics.median(seconds["forkserver"])
    return LaunchBenchmark(nprocs, {m: tuple(s) for m, s in seconds.items()}, first if started_here else None)


def _rank(strategy) -> int:
    return strategy.rank


def timed_launch(method: str, nprocs: int) -> float:
    """Seconds of one whole ``launch`` of a function that returns at once (one thread per worker)."""
    started = time.perf_counter()
    launch(_rank, nprocs, start_method=method, threads_per_process=1, verbose=False)
    return time.perf_counter() - started
