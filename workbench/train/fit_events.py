"""`FitEvents`: what a fit tells its subscribers, built as the typed events of `event_schema` from the loop's
state and handed to its `CallbackList`; it keeps the last metrics per split (the fit's result and last
event carry them)."""

from __future__ import annotations

import time
from typing import Any

from workbench.train.batches import fit_epochs
from workbench.train.config import TrainConfig
from workbench.train.event_schema import FitStartEvent, eval_event, fit_end_event, step_event
from workbench.train.events import CallbackList
from workbench.train.log_window import LogWindow
from workbench.train.strategy import Strategy
from workbench.train.trained_what import TrainedWhat


class FitEvents:
    """The events of one trainer's fits, for `events` (its subscribers)."""

    def __init__(
        self,
        events: CallbackList,
        strategy: Strategy,
        config: TrainConfig,
        run: str | None,
        what: TrainedWhat,
    ) -> None:
        self.events, self.strategy, self.config, self.run = events, strategy, config, run
        self.what = what  # the model and data, as given
        self.last: dict[str, dict[str, float]] = {}  # split → its last metrics ("train": the last loss)

    def fit_start(self, step: int, steps: tuple[int | None, int | None], resume_changes: str) -> None:
        """A fit starts after `step` steps; `steps`: per epoch and in all (None: unknown)."""
        info = FitStartEvent(
            run=self.run,
            rank=self.strategy.rank,
            world_size=self.strategy.world_size,
            strategy=self.strategy.describe(),
            global_batch=self.config.batch_size * self.strategy.data_world_size * self.config.accumulate,
            epochs=fit_epochs(self.config, steps[0]),
            steps_per_epoch=steps[0],
            total_steps=steps[1],
            start_step=step,
            config=self.config.to_dict(),
            **self.what,
            time=time.time(),
        )
        self.events.on_fit_start({**info, "resume_changes": resume_changes} if resume_changes else info)

    def step(
        self, where: tuple[int, int], window: LogWindow, all_ranks_sum: float | None, **fields: Any
    ) -> None:
        """A logged step at `where` (step, epoch): the loss and throughput of `window` (over all ranks:
        `all_ranks_sum`), the strategy's details, and `fields` (lr, grad_norm, the instruments')."""
        metrics = {**window.step_metrics(self.strategy, all_ranks_sum), **self.strategy.step_details()}
        self.last["train"] = {"loss": metrics["loss"]}
        self.events.on_step(step_event(*where, self.strategy.rank, **fields, **metrics))

    def evaluated(self, step: int, epoch: int, split: str, metrics: dict[str, float]) -> dict[str, float]:
        """`split`'s evaluation after epoch `epoch` (nothing for an empty split); returns its `metrics`."""
        if metrics:
            self.last[split] = metrics
            self.events.on_eval(eval_event(step, epoch, self.strategy.rank, split, metrics))
        return metrics

    def fit_end(
        self, where: tuple[int, int], status: str, error: BaseException | None, **extras: Any
    ) -> None:
        """The fit ended at `where` (step, epoch); `extras`: the checkpoint and the compile totals."""
        rank = self.strategy.rank
        self.events.on_fit_end(fit_end_event(*where, rank, status=status, error=error, **extras, **self.last))
