"""The variants `benchmark_trainer` times, and what the peers' benchmark shares: the model, the data and
config, a hand-written loop (torch's Adam or fused Adam, in-memory batches or a DataLoader), the Trainer
with logs or a Dashboard attached, and the step clock's own work."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterable

import torch
from torch.nn import functional
from torch.utils.data import DataLoader

from workbench import models
from workbench.bench.work_clock import WorkClock
from workbench.data import ShardedLoader, Splits, load_dataset, split_dataset
from workbench.train import OptimizerConfig, TrainConfig, Trainer
from workbench.train.events import Callback, CallbackList, Event
from workbench.train.job_runner import JobRunner
from workbench.train.step_time import StepClock


def step_clock_seconds(repeats: int = 2000) -> float:
    """Seconds of the step clock's own work in one logged step: the loop's marks, the strategy's, and the
    report (the median of `repeats`, each timed alone)."""
    phases = ("other", "copy", "forward", "backward", "comm", "other", "optimizer", "other")
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        clock = StepClock(torch.device("cpu"), started=started)
        clock.add("data", 0.0)
        for phase in phases:
            clock.mark(phase)
        clock.report()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def bench_setup(epochs: int, n_samples: int = 4096) -> tuple[Splits, TrainConfig]:
    data = load_dataset("synthetic_images", n_samples=n_samples, image_size=32, seed=0)
    splits = split_dataset(data, (0.9, 0.1, 0.0), seed=0)
    config = TrainConfig(epochs=epochs, batch_size=128, optimizer=OptimizerConfig("adam", lr=1e-3), seed=0)
    return splits, config


def hand_written_seconds(epochs: int) -> float:
    """One timed run of the hand-written loop (`workbench bench kernel-env` runs it in child processes)."""
    splits, config = bench_setup(epochs)
    return timed(lambda: hand_written(bench_model(), splits, config))


def background_dashboard_seconds(epochs: int) -> float:
    """One timed run of the Trainer through `Dashboard.start` + `wait` (training on a second thread)."""
    splits, config = bench_setup(epochs)
    return with_dashboard(splits, config, 0, background=True)[0]


def on_a_second_thread(splits: Splits, config: TrainConfig, *, release: bool) -> float:
    """One timed run of the Trainer (no dashboard) on a second thread: through `JobRunner.start` (`release`:
    the calling thread's idle OpenMP team freed first, `workbench.devices.openmp`), or on a
    ``threading.Thread`` of its own, that team left as it is."""
    trainer = bench_trainer(splits, config)
    if release:
        runner = JobRunner(trainer)
        return timed(lambda: (runner.start(), runner.wait()))
    thread = threading.Thread(target=trainer.fit)
    return timed(lambda: (thread.start(), thread.join()))


def bench_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return models.mlp(3 * 32 * 32, 10, hidden=(512, 512))


def bench_trainer(splits: Splits, config: TrainConfig) -> Trainer:
    return Trainer(bench_model(), functional.cross_entropy, splits, config)


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def logged_seconds(splits: Splits, config: TrainConfig, folder: str) -> tuple[float, WorkClock]:
    """One timed run of the Trainer writing its run directory under `folder` and, with their extras,
    TensorBoard and MLflow logs there (checkpoints off: `checkpoint_every` beyond the last epoch), and the
    clock of the logs' own work. The folder is the benchmark's, as a user's runs directory is: the first run
    creates the MLflow store."""
    import dataclasses
    import importlib.util

    from workbench.train.loggers import MLflowLogger, TensorBoardLogger

    installed = {name: importlib.util.find_spec(name) is not None for name in ("tensorboard", "mlflow")}
    callbacks: list[Callback] = []
    if installed["tensorboard"]:
        callbacks.append(TensorBoardLogger(f"{folder}/tensorboard"))
    if installed["mlflow"]:
        callbacks.append(MLflowLogger(f"{folder}/mlflow.db"))
    trainer = Trainer(
        bench_model(),
        functional.cross_entropy,
        splits,
        dataclasses.replace(config, checkpoint_every=config.epochs + 1),
        callbacks=callbacks,
        run="bench",
        runs_dir=folder,
        overwrite=True,  # each repeat writes the same run again
    )
    clock = WorkClock()
    # metrics.jsonl's writer and the loggers, each timed
    trainer.events.callbacks = clock.clocked(trainer.events.callbacks)
    with clock.threads():
        seconds = timed(trainer.fit)
    return seconds, clock


def hand_written(model: torch.nn.Module, splits: Splits, config: TrainConfig, fused: bool = False) -> None:
    """The loop a PyTorch user writes, logging the loss every step like the Trainer does (with torch's default
    Adam, or its fused one as the Trainer builds it)."""
    torch.manual_seed(config.seed)
    fastest = {"fused": True} if fused else {}
    optimizer = torch.optim.Adam(model.parameters(), lr=config.optimizer.lr, **fastest)
    loader = ShardedLoader(splits.train, config.batch_size, shuffle=True, seed=config.seed)
    losses = []
    for epoch in range(config.epochs):
        loader.set_epoch(epoch)
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            for x, y in ShardedLoader(splits.val, config.batch_size, shuffle=False, remainder="uneven"):
                functional.cross_entropy(model(x), y)


def hand_written_loader(model: torch.nn.Module, splits: Splits, config: TrainConfig) -> None:
    """The same loop over torch DataLoaders, as most PyTorch code is written."""
    torch.manual_seed(config.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.optimizer.lr)
    train = DataLoader(splits.train, batch_size=config.batch_size, shuffle=True)
    val = DataLoader(splits.val, batch_size=config.batch_size)
    train_and_validate(model, optimizer, train, val, config.epochs)


def train_and_validate(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    train: Iterable,
    val: Iterable,
    epochs: int,
    backward: Callable[[torch.Tensor], None] = torch.Tensor.backward,
    device: torch.device | None = None,
) -> None:
    """The hand-written loop's epochs: zero_grad, forward, loss, `backward` (a peer's own, e.g.
    ``fabric.backward``), step, ``loss.item()``; then a pass over `val` without gradients. With `device`,
    each batch is copied there first (``non_blocking``), as a loop over a CPU DataLoader does for a GPU."""
    losses = []
    for _ in range(epochs):
        model.train()
        for x, y in train:
            if device is not None:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = functional.cross_entropy(model(x), y)
            backward(loss)
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            for x, y in val:
                if device is not None:
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                functional.cross_entropy(model(x), y)


class _TimedCallbacks(CallbackList):
    """Forwards events like `CallbackList`, recording how long each on_step took on the training thread."""

    def __init__(self, callbacks: list[Callback]) -> None:
        super().__init__(callbacks)
        self.step_costs: list[float] = []

    def on_step(self, metrics: Event) -> None:
        started = time.perf_counter()
        super().on_step(metrics)
        self.step_costs.append(time.perf_counter() - started)


def with_dashboard(
    splits: Splits, config: TrainConfig, history: int, *, background: bool
) -> tuple[float, list[float], float]:
    from workbench.widgets.dashboard import Dashboard

    trainer = bench_trainer(splits, config)
    dashboard = Dashboard(trainer)
    _fill_history(dashboard, history)
    counted = _TimedCallbacks(list(trainer.events.callbacks))
    trainer.events.callbacks = [counted]
    seconds = timed((lambda: (dashboard.start(), dashboard.wait())) if background else dashboard.fit)
    fraction = dashboard.sampler.cpu_fraction if dashboard.sampler is not None else 0.0
    dashboard.close()
    return seconds, counted.step_costs, fraction


def _fill_history(dashboard: object, points: int) -> None:
    """Put `points` earlier steps into the loss plot, as a long run would have."""
    plot = dashboard.loss_plot  # type: ignore[attr-defined]
    plot.on_fit_start(
        {
            "run": "history",
            "rank": 0,
            "total_steps": points,
            "start_step": 0,
            "epochs": 1,
            "steps_per_epoch": points,
            "config": {},
        }
    )
    for step in range(1, points + 1):
        plot.on_step({"step": step, "epoch": 0, "loss": 1.0 / step, "lr": 1e-3, "rank": 0})
    plot.flush()
