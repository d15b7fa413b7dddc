"""What interactive ranks cost: starting a `RankPool` against a whole `launch`, and a warm cell's overhead.

    workbench bench launch --ranks --nprocs 4      # 5 alternating repeats, medians and ranges

Start: `RankPool(n).start()` (ranks started, process group joined, serving) against ``launch(fn, n)`` of a
function that returns at once (started, joined, run, left), alternating the two. Overhead: on a warm pool,
the seconds a ``%%ranks`` cell of ``pass`` takes from the notebook's side (send the code to every rank,
every rank's reply back), and of a cell that sleeps 0.2 s, minus the 0.2 s.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from workbench._validate import check_int
from workbench.bench.launch import timed_launch
from workbench.parallel.launching.rank_pool import RankPool
from workbench.tables import text_table

_SLEEP_S = 0.2


@dataclass(frozen=True)
class RankPoolBenchmark:
    """Seconds of every repeat: pool start, launch, an empty cell, a 0.2 s cell's overhead."""

    nprocs: int
    pool_start: tuple[float, ...]
    launch: tuple[float, ...]
    empty_cell: tuple[float, ...]
    sleep_overhead: tuple[float, ...]

    def table(self) -> str:
        def cell(samples: tuple[float, ...], unit: float = 1.0, digits: int = 2) -> str:
            scaled = [s * unit for s in samples]
            return (
                f"{statistics.median(scaled):.{digits}f} ({min(scaled):.{digits}f}–{max(scaled):.{digits}f})"
            )

        ratio = statistics.median(self.pool_start) / statistics.median(self.launch)
        rows = [
            [f"RankPool({self.nprocs}).start()", f"{cell(self.pool_start)} s", f"{ratio:.2f}× launch"],
            [f"launch(fn, {self.nprocs}) of a function that returns", f"{cell(self.launch)} s", "1.00×"],
            ["warm %%ranks cell: pass", f"{cell(self.empty_cell, 1e3, 1)} ms", "overhead"],
            [
                f"warm %%ranks cell: sleep {_SLEEP_S} s, minus {_SLEEP_S} s",
                f"{cell(self.sleep_overhead, 1e3, 1)} ms",
                "overhead",
            ],
        ]
        return text_table([f"{self.nprocs} ranks", "median (range)", ""], rows)


def benchmark_rank_pool(*, nprocs: int = 4, repeats: int = 5, cells: int = 20) -> RankPoolBenchmark:
    """Time `repeats` pool starts and launches, alternating; then `cells` warm cells of each kind."""
    check_int("nprocs", nprocs, minimum=1)
    check_int("repeats", repeats, minimum=1)
    check_int("cells", cells, minimum=1)
    timed_launch("forkserver", nprocs)  # starts this process's fork server
    starts, launches = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        pool = RankPool(nprocs, threads_per_process=1).start()
        starts.append(time.perf_counter() - began)
        pool.stop()
        launches.append(timed_launch("forkserver", nprocs))
    empty, sleeping = [], []
    with RankPool(nprocs, threads_per_process=1) as pool:
        pool.run("import time")
        for _ in range(cells):
            empty.append(_timed(pool, "pass"))
            sleeping.append(_timed(pool, f"time.sleep({_SLEEP_S})") - _SLEEP_S)
    return RankPoolBenchmark(nprocs, tuple(starts), tuple(launches), tuple(empty), tuple(sleeping))


def _timed(pool: RankPool, code: str) -> float:
    began = time.perf_counter()
    run = pool.run(code)
    if run.failed:
        raise RuntimeError(f"the benchmark's cell {code!r} failed on rank(s) {run.failed}")
    return time.perf_counter() - began
