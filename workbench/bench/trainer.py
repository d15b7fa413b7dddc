"""How much the Trainer and its Dashboard cost: one run, three loops on the same model, data and seed.

    workbench bench trainer            # prints the table and the ratios
    python -m workbench bench trainer --repeats 7

Measured in one process, alternating the variants and taking the median of `repeats`:

- ``hand-written``: the plain PyTorch loop (zero_grad, forward, loss, backward, step, ``loss.item()``) with
  torch's default Adam, and the same with torch's fused Adam (``fused=True``), which the Trainer builds;
- ``Trainer``: `workbench.train.Trainer` with no callbacks (against both hand loops: all it changes, and the
  loop's own cost with the same optimizer), and the same with ``time_breakdown=False`` (what timing the
  logged steps' phases costs);
- the same two over a torch ``TensorDataset`` of the same tensors, batched by a ``DataLoader`` (the path
  for your own data), against each other: what the Trainer adds to a loader-bound loop;
- ``Trainer + logs``: the Trainer writing ``metrics.jsonl`` (a run name; no checkpoint: they are a cost of
  their own) with a `TensorBoardLogger` and an `MLflowLogger` (each when its extra is installed), against
  the Trainer without; and the logs' own work, clocked (`WorkClock`): time in their callbacks on the
  training thread plus the CPU time of the threads they start (MLflow's sender, TensorBoard's writer),
  which a wall-clock ratio on a shared machine cannot resolve to 1%;
- ``Trainer + Dashboard``: the same with a `Dashboard` attached (loss plot, progress, device sampler at 2 Hz),
  `Dashboard.fit` (training on this thread);
- ``... in the background``: the same through `Dashboard.start` + `wait`, i.e. training in a second thread
  as the Start button does (`JobRunner.start` first frees this thread's idle OpenMP team, which would
  otherwise slow every parallel op of the training thread: `workbench.devices.openmp`);
- the Trainer alone on a second thread, through `JobRunner.start` and on a ``threading.Thread`` of its own
  (which leaves this thread's idle OpenMP team as it is: it runs right after `Dashboard.fit` on this
  thread, as after a notebook's earlier cells).

Also: the dashboard's own work on the training thread per step (its callbacks timed where they run) with
``history`` points already in the loss plot, and the device sampler's CPU time as a fraction of one core.
Outside a Jupyter kernel the widgets have no frontend, so messages to the browser are built but not sent.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass, field

from torch.utils.data import TensorDataset

from workbench._validate import check_int
from workbench.bench.trainer_variants import (
    bench_model,
    bench_setup,
    bench_trainer,
    hand_written,
    hand_written_loader,
    logged_seconds,
    on_a_second_thread,
    step_clock_seconds,
    timed,
    with_dashboard,
)
from workbench.bench.work_clock import WorkClock
from workbench.data import ShardedLoader, Splits
from workbench.tables import text_table


@dataclass(frozen=True)
class TrainerBenchmark:
    """Results of `benchmark_trainer` (seconds are medians over repeats)."""

    steps: int
    hand_written_s: float
    hand_fused_s: float  # the hand-written loop with torch's fused Adam (the optimizer the Trainer builds)
    trainer_s: float
    untimed_s: float  # the Trainer with time_breakdown=False
    breakdown_s: float  # the step clock's own work in one logged step (its marks and report), seconds
    logged_steps: int  # logged steps in one run (every log_every-th and each epoch's last)
    hand_loader_s: float
    trainer_loader_s: float
    dashboard_s: float
    logged_s: float  # the Trainer writing metrics.jsonl (a run name, no checkpoints), TensorBoard and MLflow
    logs_thread_s: float  # of which in the logs' callbacks, on the training thread
    logs_events_s: float  # of that, in step and evaluation events (the rest: at the fit's start and end)
    logs_cpu_s: float  # and CPU time of the threads the logs start (beyond the plain Trainer's)
    background_s: float
    second_thread_s: float  # the Trainer through JobRunner.start: the caller's idle OpenMP team freed first
    own_thread_s: float  # the Trainer on a threading.Thread of its own: that team left as it is
    dashboard_us_per_step_mean: float
    dashboard_us_per_step_max: float
    history_points: int
    sampler_core_fraction: float
    runs: dict[str, tuple[float, ...]] = field(default_factory=dict)  # every run's seconds, in order

    def ratio_range(self, variant: str, baseline: str) -> tuple[float, float]:
        """Lowest and highest ratio of `variant` to `baseline` over the repeats, each repeat's runs taken
        side by side (they alternate, so a slow moment of the machine touches both)."""
        ratios = [v / b for v, b in zip(self.runs[variant], self.runs[baseline], strict=True)]
        return min(ratios), max(ratios)

    def _ratio(self, median: float, variant: str, baseline: str) -> str:
        if variant not in self.runs:
            return f"{median:.3f}"
        low, high = self.ratio_range(variant, baseline)
        return f"{median:.3f} ({low:.2f}–{high:.2f})"

    @property
    def trainer_ratio(self) -> float:
        """Trainer time / hand-written time (1.03 = 3% slower)."""
        return self.trainer_s / self.hand_written_s

    @property
    def loop_ratio(self) -> float:
        """Trainer time / the hand-written loop's with the same (fused) optimizer: the loop's own cost."""
        return self.trainer_s / self.hand_fused_s

    @property
    def breakdown_ratio(self) -> float:
        """Trainer timing its logged steps' phases (the default) / Trainer with time_breakdown=False."""
        return self.trainer_s / self.untimed_s

    @property
    def breakdown_work_ratio(self) -> float:
        """(Trainer + the step clock's own work in a run's logged steps) / Trainer: what timing the phases
        adds, as work done (a wall-clock ratio on a shared machine cannot resolve it)."""
        return 1 + self.breakdown_s * self.logged_steps / self.trainer_s

    @property
    def loader_ratio(self) -> float:
        """Trainer over a torch Dataset / hand-written loop over a DataLoader of the same data."""
        return self.trainer_loader_s / self.hand_loader_s

    @property
    def logged_ratio(self) -> float:
        """Trainer with its logs (metrics.jsonl, TensorBoardLogger, MLflowLogger) / Trainer without."""
        return self.logged_s / self.trainer_s

    @property
    def logs_work_ratio(self) -> float:
        """(Trainer + the logs' clocked work) / Trainer: logging's cost to this fit, as work done."""
        return (self.trainer_s + self.logs_thread_s + self.logs_cpu_s) / self.trainer_s

    @property
    def logs_events_ratio(self) -> float:
        """(Trainer + the logs' work in step and evaluation events) / Trainer: what logging adds to training
        as it goes, whatever the fit's length (the start and end cost the same for a fit of any length)."""
        return (self.trainer_s + self.logs_events_s) / self.trainer_s

    @property
    def dashboard_ratio(self) -> float:
        """Trainer + Dashboard time / hand-written time."""
        return self.dashboard_s / self.hand_written_s

    @property
    def background_ratio(self) -> float:
        """Trainer + Dashboard in a background thread / hand-written time."""
        return self.background_s / self.hand_written_s

    def table(self) -> str:
        """The results as a text table with the issue's targets."""
        rows = [
            ["hand-written loop", f"{self.hand_written_s:.3f} s", "1.000", ""],
            [
                "Trainer (torch's fused Adam)",
                f"{self.trainer_s:.3f} s",
                self._ratio(self.trainer_ratio, "trainer", "hand"),
                "≤ 1.00",
            ],
            [
                "... / the hand-written loop with fused Adam too",
                f"{self.hand_fused_s:.3f} s",
                self._ratio(self.loop_ratio, "trainer", "hand_fused"),
                "≤ 1.03",
            ],
            [
                "Trainer, time breakdown on (default) / off",
                f"{self.untimed_s:.3f} s off",
                self._ratio(self.breakdown_ratio, "trainer", "untimed"),
                "(noise)",
            ],
            [
                "... the step clock's own work in the logged steps",
                f"{1e6 * self.breakdown_s:.1f} µs × {self.logged_steps}",
                f"{self.breakdown_work_ratio:.5f}",
                "≤ 1.02",
            ],
            ["hand-written loop over a DataLoader", f"{self.hand_loader_s:.3f} s", "1.000", ""],
            [
                "Trainer over a torch Dataset",
                f"{self.trainer_loader_s:.3f} s",
                self._ratio(self.loader_ratio, "trainer_loader", "hand_loader"),
                "≤ 1.02",
            ],
            [
                "Trainer + logs (metrics.jsonl, TensorBoard, MLflow) / Trainer, wall clock",
                f"{self.logged_s:.3f} s",
                self._ratio(self.logged_ratio, "logged", "trainer"),
                "(noise)",
            ],
            [
                "... the logs' own work in step and evaluation events",
                f"{1e3 * self.logs_events_s:.1f} ms",
                self._ratio(self.logs_events_ratio, "logs_events", "trainer"),
                "≤ 1.01",
            ],
            [
                "... and once per fit (start, end, MLflow's run) + their threads' CPU",
                f"{1e3 * (self.logs_thread_s - self.logs_events_s):.1f} + {1e3 * self.logs_cpu_s:.1f} ms",
                self._ratio(self.logs_work_ratio, "logs_work", "trainer"),
                "",
            ],
            [
                "Trainer + Dashboard",
                f"{self.dashboard_s:.3f} s",
                self._ratio(self.dashboard_ratio, "dashboard", "hand"),
                "≤ 1.03",
            ],
            [
                "... in the background (Start)",
                f"{self.background_s:.3f} s",
                self._ratio(self.background_ratio, "background", "hand"),
                "",
            ],
            [
                "Trainer on a second thread (JobRunner.start) / on this one",
                f"{self.second_thread_s:.3f} s",
                self._ratio(self.second_thread_s / self.trainer_s, "second_thread", "trainer"),
                "",
            ],
            [
                "... on a thread of your own (this thread's OpenMP team kept)",
                f"{self.own_thread_s:.3f} s",
                self._ratio(self.own_thread_s / self.trainer_s, "own_thread", "trainer"),
                "",
            ],
            [
                f"dashboard work per step ({self.history_points:,} points)",
                f"{self.dashboard_us_per_step_mean:.1f} µs mean, {self.dashboard_us_per_step_max:.0f} µs max",
                "",
                "≤ 10 µs mean, ≤ 1 ms max",
            ],
            ["device sampler (2 Hz)", f"{100 * self.sampler_core_fraction:.3f}% of a core", "", "≤ 1%"],
        ]
        return text_table(["what", "measured", "ratio (range over repeats)", "target"], rows)


def benchmark_trainer(
    *, repeats: int = 5, epochs: int = 6, n_samples: int = 4096, history: int = 1_000_000
) -> TrainerBenchmark:
    """Time the three loops (see the module docstring) and return the medians.

    Args:
        repeats: runs of each variant (alternating), ≥ 1.
        epochs, n_samples: how long one run is (synthetic 3×32×32 images, MLP 3072-512-512-10, batch 128).
        history: points put into the loss plot before the timed dashboard runs.
    """
    check_int("repeats", repeats, minimum=1)
    check_int("epochs", epochs, minimum=1)
    check_int("n_samples", n_samples, minimum=16)
    check_int("history", history, minimum=0)
    splits, config = bench_setup(epochs, n_samples)
    steps = len(ShardedLoader(splits.train, config.batch_size)) * epochs

    torch_splits = Splits(
        TensorDataset(splits.train.features, splits.train.targets),
        val=TensorDataset(splits.val.features, splits.val.targets),
    )
    timings: dict[str, list[float]] = {
        "hand": [],
        "hand_fused": [],
        "trainer": [],
        "untimed": [],
        "hand_loader": [],
        "trainer_loader": [],
        "logged": [],
        "logs_thread": [],
        "logs_events": [],
        "logs_cpu": [],
        "dashboard": [],
        "background": [],
        "second_thread": [],
        "own_thread": [],
    }
    untimed = config.replace(time_breakdown=False)
    per_step: list[float] = []
    sampler_fractions: list[float] = []
    hand_written(bench_model(), splits, config)  # warm-up: allocator, thread pools, first-call costs
    logs = tempfile.TemporaryDirectory(prefix="workbench-bench-")
    logged_seconds(splits, config, logs.name)  # imports the loggers' tools, creates the MLflow store
    for _ in range(repeats):
        timings["hand"].append(timed(lambda: hand_written(bench_model(), splits, config)))
        timings["hand_fused"].append(timed(lambda: hand_written(bench_model(), splits, config, fused=True)))
        plain = WorkClock()
        with plain.threads():
            timings["trainer"].append(timed(lambda: bench_trainer(splits, config).fit()))
        timings["untimed"].append(timed(lambda: bench_trainer(splits, untimed).fit()))
        hand_loader = timed(lambda: hand_written_loader(bench_model(), torch_splits, config))
        timings["hand_loader"].append(hand_loader)
        timings["trainer_loader"].append(timed(lambda: bench_trainer(torch_splits, config).fit()))
        seconds, clock = logged_seconds(splits, config, logs.name)
        timings["logged"].append(seconds)
        timings["logs_thread"].append(clock.callbacks_s)
        timings["logs_events"].append(clock.callbacks_s - clock.fit_edges_s)
        timings["logs_cpu"].append(max(clock.threads_cpu_s - plain.threads_cpu_s, 0.0))
        seconds, costs, fraction = with_dashboard(splits, config, history, background=False)
        timings["dashboard"].append(seconds)
        per_step.extend(costs)
        sampler_fractions.append(fraction)
        # after Dashboard.fit on this thread, as after a notebook's earlier cells: its OpenMP team is there
        timings["own_thread"].append(on_a_second_thread(splits, config, release=False))
        timings["background"].append(with_dashboard(splits, config, history, background=True)[0])
        timings["second_thread"].append(on_a_second_thread(splits, config, release=True))
    logs.cleanup()
    return TrainerBenchmark(
        steps=steps,
        hand_written_s=statistics.median(timings["hand"]),
        hand_fused_s=statistics.median(timings["hand_fused"]),
        trainer_s=statistics.median(timings["trainer"]),
        untimed_s=statistics.median(timings["untimed"]),
        breakdown_s=step_clock_seconds(),
        logged_steps=steps // config.log_every + epochs,  # at most: a logged step also ends each epoch
        hand_loader_s=statistics.median(timings["hand_loader"]),
        trainer_loader_s=statistics.median(timings["trainer_loader"]),
        logged_s=statistics.median(timings["logged"]),
        logs_thread_s=statistics.median(timings["logs_thread"]),
        logs_events_s=statistics.median(timings["logs_events"]),
        logs_cpu_s=statistics.median(timings["logs_cpu"]),
        dashboard_s=statistics.median(timings["dashboard"]),
        background_s=statistics.median(timings["background"]),
        second_thread_s=statistics.median(timings["second_thread"]),
        own_thread_s=statistics.median(timings["own_thread"]),
        dashboard_us_per_step_mean=1e6 * statistics.fmean(per_step),
        dashboard_us_per_step_max=1e6 * max(per_step),
        history_points=history,
        sampler_core_fraction=statistics.median(sampler_fractions),
        runs={
            **{name: tuple(seconds) for name, seconds in timings.items()},
            "logs_events": tuple(map(sum, zip(timings["trainer"], timings["logs_events"], strict=True))),
            "logs_work": tuple(
                map(sum, zip(timings["trainer"], timings["logs_thread"], timings["logs_cpu"], strict=True))
            ),
        },
    )
