"""Does data parallel pay on this machine? Throughput of N processes × T threads vs 1 process × T threads.

    workbench bench ddp                      # 2 processes × 1 thread vs 1 × 1, compute-bound MLP
    workbench bench ddp --nprocs 2 --threads 1 --steps 30

Both runs go through the product path: `launch` + `Trainer` + `DataParallel` (DDP over gloo on CPU),
the same model, data and per-rank batch; only the number of processes differs. Throughput counts the
samples of all ranks per second of steady-state training: the global batch over the median time between
rank 0's steps after `warmup` steps (from the trainer's own step events; one step disturbed by a background
process does not count). Ideal scaling is N×; the all-reduce of the gradients and the cores the
processes share eat into it.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass, field

import torch
from torch.nn import functional

from workbench import models
from workbench._validate import check_int
from workbench.data import Dataset, Splits
from workbench.parallel import launch
from workbench.parallel.launching.launcher import check_nprocs
from workbench.tables import text_table
from workbench.train import Callback, OptimizerConfig, TrainConfig, Trainer
from workbench.train.events import Event
from workbench.train.step_time import PHASES

FEATURES, HIDDEN, CLASSES = 1024, (1024, 1024), 10


@dataclass(frozen=True)
class Throughput:
    """One configuration's steady-state speed."""

    processes: int
    threads: int
    samples_per_s: float
    seconds_per_step: float
    phases: dict[str, float] = field(default_factory=dict)  # rank 0's median seconds per step_time phase


@dataclass(frozen=True)
class DataParallelBenchmark:
    """Results of `benchmark_data_parallel`: the baseline (1 process) and the data-parallel run."""

    baseline: Throughput
    parallel: Throughput
    batch_per_rank: int
    parameters: int

    @property
    def speedup(self) -> float:
        """Samples/s of the parallel run over the baseline's (ideal: the number of processes)."""
        return self.parallel.samples_per_s / self.baseline.samples_per_s

    def table(self) -> str:
        """The two runs and the speed-up as text."""
        rows = [
            [
                f"{t.processes} process{'es' if t.processes > 1 else ''} × {t.threads} thread",
                f"{t.samples_per_s:,.0f}",
                f"{t.seconds_per_step * 1e3:.1f}",
                f"{t.samples_per_s / self.baseline.samples_per_s:.2f}",
            ]
            for t in (self.baseline, self.parallel)
        ]
        return text_table(["run", "samples/s", "ms/step", "vs 1 process"], rows)

    def breakdown(self) -> str:
        """Where rank 0's step time goes in both runs (median ms per phase), and what the parallel run adds:
        the part of ideal scaling that is lost."""
        runs = [t for t in (self.baseline, self.parallel) if t.phases]
        if not runs:
            return ""
        rows = [[f"{t.processes} process{'es' if t.processes > 1 else ''}"] for t in runs]
        for row, run in zip(rows, runs, strict=True):
            row += [f"{1e3 * run.phases[phase]:.1f}" for phase in PHASES]
            row.append(f"{1e3 * run.phases['comm_overlapped']:.1f}")
        table = text_table(["rank 0, ms per step", *PHASES, "overlapped"], rows)
        if len(runs) < 2:
            return table
        added = {phase: self.parallel.phases[phase] - self.baseline.phases[phase] for phase in PHASES}
        largest = sorted(added, key=lambda phase: -added[phase])[:2]
        parts = ", ".join(f"{phase} {1e3 * added[phase]:+.1f} ms" for phase in largest)
        return f"{table}\nthe parallel step's extra time: {parts} (comm: all-reduce not hidden by backward)"


class _StepClock(Callback):
    """Rank 0's step times and phase breakdowns after the warm-up (every step is logged)."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.times: list[float] = []
        self.breakdowns: list[dict] = []

    def on_step(self, metrics: Event) -> None:
        if metrics["step"] >= self.warmup:
            self.times.append(time.perf_counter())
            if "step_time" in metrics:
                self.breakdowns.append(metrics["step_time"])

    def median_phases(self) -> dict[str, float]:
        """Median seconds of each phase (and of the overlapped all-reduce) over the steps after warm-up."""
        if not self.breakdowns:
            return {}
        keys = (*PHASES, "comm_overlapped")
        return {key: statistics.median(b[key] for b in self.breakdowns) for key in keys}

    def median_step_s(self) -> float:
        """The median time between consecutive steps: one slow step (a background process) does not count."""
        return statistics.median(b - a for a, b in itertools.pairwise(self.times))


def _synthetic_splits(samples: int, seed: int = 0) -> Splits:
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(samples, FEATURES, generator=generator)
    targets = torch.randint(0, CLASSES, (samples,), generator=generator)
    train = Dataset("synthetic", features, targets, "classification", num_classes=CLASSES)
    empty = train.subset(torch.arange(0))
    return Splits(train, empty, empty)


def _measure(strategy, splits: Splits, config: TrainConfig, warmup: int) -> tuple[float, dict[str, float]]:
    """Runs in each worker: train; rank 0's median seconds per step after the warm-up, and per phase."""
    torch.manual_seed(0)
    model = models.mlp(FEATURES, CLASSES, hidden=HIDDEN)
    clock = _StepClock(warmup)
    Trainer(model, functional.cross_entropy, splits, config, strategy=strategy, callbacks=[clock]).fit()
    return clock.median_step_s(), clock.median_phases()


def benchmark_data_parallel(
    nprocs: int = 2, threads: int = 1, steps: int = 15, warmup: int = 3, batch_per_rank: int = 2048
) -> DataParallelBenchmark:
    """Time `steps` training steps with 1 process and with `nprocs` processes, `threads` threads each.

    Example:
        >>> result = benchmark_data_parallel(nprocs=2, steps=3, warmup=1, batch_per_rank=8)
        >>> result.parallel.processes, result.baseline.processes, result.speedup > 0
        (2, 1, True)
    """
    check_int("nprocs", nprocs, minimum=2)
    check_nprocs(nprocs)  # before the data for every rank is made
    check_int("threads", threads, minimum=1)
    check_int("warmup", warmup, minimum=1)
    check_int("steps", steps, minimum=warmup + 1)
    check_int("batch_per_rank", batch_per_rank, minimum=1)
    config = TrainConfig(
        epochs=1, batch_size=batch_per_rank, optimizer=OptimizerConfig("sgd", lr=0.01), log_every=1
    )
    results = []
    for processes in (1, nprocs):
        splits = _synthetic_splits(batch_per_rank * processes * steps)
        step_s, phases = launch(
            _measure, processes, args=(splits, config, warmup), threads_per_process=threads, verbose=False
        )
        results.append(Throughput(processes, threads, batch_per_rank * processes / step_s, step_s, phases))
    parameters = sum(p.numel() for p in models.mlp(FEATURES, CLASSES, hidden=HIDDEN).parameters())
    return DataParallelBenchmark(results[0], results[1], batch_per_rank, parameters)
