"""`Job`: what a dashboard (or any driver) can do with a training job, whatever runs it.

A `Trainer` (this process) and a `Launch` (worker processes, in the `parallel` package) both meet it, so a
view drives either through these members alone and never asks which one it has.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from workbench.train.config import TrainConfig
from workbench.train.control import TrainControl
from workbench.train.events import Callback, CallbackList


@runtime_checkable
class Job(Protocol):
    """A training job a driver can watch and steer.

    Example:
        >>> import torch
        >>> from workbench.data import load_dataset, split_dataset
        >>> from workbench.train import Trainer
        >>> splits = split_dataset(load_dataset("regression", n_samples=200), (0.8, 0.1, 0.1), seed=0)
        >>> isinstance(Trainer(torch.nn.Linear(10, 1), torch.nn.functional.mse_loss, splits), Job)
        True
    """

    config: TrainConfig  # the settings the job trains with (a driver shows its lr and clipping)
    control: TrainControl  # pause, stop, lr and clipping requests, acted on at step boundaries
    step: int  # optimizer steps done (rank 0's, for several processes)
    total_steps: int | None  # steps when finished (0 until a distributed job has reported it; None: unknown)
    checkpoint: Any  # the last checkpoint written (rank 0's path), or None

    def add_callback(self, callback: Callback) -> None:
        """Subscribe `callback` to the job's events."""

    def fit(self, resume: bool = False) -> Any:
        """Run the job to its end on the calling thread; return its result or raise its error."""

    def terminate(self) -> None:
        """Stop as soon as possible, from any thread (after `control.stop()` was not enough in time)."""

    def describe(self) -> str:
        """One line: where the job runs (processes, devices, the parallelism)."""

    def worker_pids(self) -> dict[int, int] | None:
        """rank → pid of the worker processes training now (they change from run to run); None when the
        job trains in this process (a driver samples this process anyway)."""


class InProcessJob:
    """The `Job` members of a job that trains in this process (the `Trainer`), answered from its `events`,
    `strategy` and `control`."""

    events: CallbackList
    strategy: Any
    control: TrainControl
    record: Any  # its RunRecord

    @property
    def checkpoint(self) -> Any:
        """The last checkpoint written or resumed from (a trainer with ``run=``), or None."""
        return self.record.checkpoint

    def add_callback(self, callback: Callback) -> None:
        """Subscribe `callback` to this trainer's events (a dashboard attaching itself, for example)."""
        self.events.callbacks.append(callback)

    def describe(self) -> str:
        """Where this trainer runs, e.g. "1 process on cpu"."""
        return self.strategy.describe()

    def terminate(self) -> None:
        """Stop at the next step boundary, from any thread (as `control.stop()`; a step is never cut)."""
        self.control.stop()

    def worker_pids(self) -> None:
        """None: a Trainer trains in this process (`Job`)."""
