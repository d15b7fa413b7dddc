"""The steps between two logged ones: their losses (kept on the device until a log), samples and time."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from typing import Any

import torch

from workbench.train.strategy import Strategy


class LogWindow:
    """Loss and throughput of the steps since the last logged one (losses stay on the device).

    Example:
        >>> window = LogWindow()
        >>> window.add(torch.tensor(0.5), samples=32); window.add(torch.tensor(0.25), samples=32)
        >>> window.mean_loss(), window.steps, window.samples
        (0.375, 2, 64)
    """

    def __init__(self) -> None:
        self.loss_sum: torch.Tensor | None = None
        self.steps = 0
        self.samples = 0
        self.started = time.perf_counter()
        self.excluded = 0.0

    def add(self, loss: torch.Tensor, samples: int) -> None:
        self.loss_sum = loss if self.loss_sum is None else self.loss_sum + loss
        self.steps += 1
        self.samples += samples

    def exclude(self, seconds: float) -> None:
        """Time not spent training (a pause) leaves the throughput alone."""
        self.excluded += seconds

    @contextlib.contextmanager
    def excluding(self) -> Iterator[None]:
        """The time inside (an evaluation, a checkpoint) is no step's: it leaves the throughput alone."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.exclude(time.perf_counter() - started)

    def loss_sum_with(self, pending: torch.Tensor | None) -> torch.Tensor | None:
        """The window's loss sum plus `pending` (a step not yet added); None when there is neither."""
        if pending is None or self.loss_sum is None:
            return self.loss_sum if pending is None else pending
        return self.loss_sum + pending

    def mean_loss(self) -> float:
        return float(self.loss_sum) / self.steps

    def samples_per_s(self) -> float:
        elapsed = time.perf_counter() - self.started - self.excluded
        return self.samples / elapsed if elapsed > 0 else math.nan

    def step_metrics(self, strategy: Strategy, all_ranks_sum: float | None) -> dict[str, Any]:
        """A logged step's ``loss`` (the mean over all ranks when there are several: `all_ranks_sum`, from
        the NaN check, over the steps), ``rank_loss`` (this rank's own, on ranks that report one) and
        ``samples_per_s`` (None on ranks whose data another rank already counts)."""
        own = self.mean_loss()
        metrics: dict[str, Any] = {"loss": own}
        if strategy.world_size > 1:
            assert all_ranks_sum is not None  # a logged step checked (and reduced) its window
            metrics["loss"] = all_ranks_sum / self.steps
            if strategy.reports_loss:
                metrics["rank_loss"] = own
        metrics["samples_per_s"] = self.samples_per_s() if strategy.reports_loss else None
        return metrics
