"""`RunRecord`: what a fit keeps in its run directory, or nothing for a trainer without ``run=``: the lock
held for the fit, ``config.json`` with the settings in force, the checkpoints, and where a resume goes on
from. Rank 0 writes; every rank takes part in gathering the state to save and in agreeing on a resume."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from workbench.train.config import TrainConfig
from workbench.train.control import Settings
from workbench.train.metrics_log import read_metrics
from workbench.train.run_dir import (
    LoopPosition,
    ResumedState,
    RunDir,
    agreed_resume_path,
    capture_training_state,
    restore_training_state,
)
from workbench.train.run_lock import lock_for_fit
from workbench.train.strategy import Strategy
from workbench.train.trained_what import ModelSummary
from workbench.train.weight_average import WeightAverage


class RunRecord:
    """The run directory of one trainer (`run_dir` None: nothing is written, nothing resumes but a path);
    `overwrite`: a fresh fit may replace a run the directory already holds (refused otherwise).

    Attributes:
        checkpoint: the last checkpoint written or resumed from.
    """

    def __init__(
        self,
        run_dir: RunDir | None,
        strategy: Strategy,
        config: TrainConfig,
        overwrite: bool = False,
        scheduler: dict[str, Any] | None = None,
        model_summary: ModelSummary | None = None,
    ) -> None:
        """`scheduler`: the torch lr scheduler the run steps, as config.json says it (`TorchSchedule`);
        `model_summary`: the model as given to the fit, kept in each checkpoint for a resume to compare."""
        self.run_dir, self.strategy, self.config, self.overwrite = run_dir, strategy, config, overwrite
        self.scheduler, self.model_summary = scheduler, model_summary
        self.checkpoint: Path | None = None
        self._writes = run_dir is not None and strategy.is_main  # one writer, also on a shared filesystem

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Around a fit: rank 0 of a named run holds its directory (`lock_for_fit`); a second fit on it is
        refused, naming the holder."""
        lock = lock_for_fit(self.run_dir.path) if self._writes and self.run_dir is not None else None
        try:
            yield
        finally:
            if lock is not None:
                lock.release()

    @property
    def folder(self) -> Path | None:
        """The run directory, or None."""
        return self.run_dir.path if self.run_dir is not None else None

    def write_config(self, settings: Settings) -> None:
        """config.json as training runs now: the config with the lr and clipping in force (a dashboard's
        change, or a resume's), so that the run's record never says what no step used."""
        if self._writes and self.run_dir is not None:
            self.run_dir.write_config(settings.in_config(self.config), self.scheduler)

    def resume(
        self, resume: bool | str | os.PathLike, model: torch.nn.Module, optimizer: Any, scaler: Any
    ) -> ResumedState | None:
        """Load the checkpoint ``fit(resume=...)`` goes on from (the ranks agree on it) into `model`,
        `optimizer` and `scaler`; None for a fresh start. New optimizer settings are printed by rank 0."""
        path = agreed_resume_path(resume, self.run_dir, self.strategy, self.overwrite)
        if path is None:
            return None
        resumed = restore_training_state(
            path, self.strategy, model, optimizer, scaler, self.config, self.model_summary
        )
        if resumed.describe() and self.strategy.is_main:
            print(f"resuming from {path} with new settings: {resumed.describe()}", file=sys.stderr)
        self.checkpoint = path
        return resumed

    def lacks_val(self, resumed: ResumedState | None) -> bool:
        """Whether the fit evaluated val right after `resumed`'s checkpoint and the run's metrics log, as it
        stands, lacks that evaluation (a crash during it); rank 0 reads the log, every rank hears its answer.
        False for a fresh start, and without a run directory, whose fits keep no log to mend."""
        if resumed is None or not resumed.val_follows or self.run_dir is None:
            return False
        logged = False
        if self.strategy.is_main:
            with warnings.catch_warnings():  # a line a crash cut short: the log's writer mends it
                warnings.simplefilter("ignore")
                with contextlib.suppress(FileNotFoundError):
                    evals = read_metrics(self.run_dir.path, "eval")
                    logged = any(
                        e.get("step") == resumed.where.step and e.get("split") == "val" for e in evals
                    )
        return not any(self.strategy.gather_object(logged))

    def due(self, epoch: int) -> bool:
        """Whether a checkpoint is due after `epoch` whole epochs."""
        return self.run_dir is not None and epoch % self.config.checkpoint_every == 0

    def due_at_step(self, step: int) -> bool:
        """Whether a checkpoint is due after optimizer step `step` (``checkpoint_every_steps``)."""
        every = self.config.checkpoint_every_steps
        return self.run_dir is not None and every is not None and step % every == 0

    def save(
        self,
        where: LoopPosition,
        model: torch.nn.Module,
        optimizer: Any,
        scaler: Any,
        scheduler: Any = None,
        early_stopping: Any = None,
        weight_average: WeightAverage | None = None,
    ) -> None:
        """Rank 0 writes the checkpoint (every rank takes part in gathering the state and RNGs); `scheduler`:
        a torch scheduler's state (`TorchSchedule.state`), `early_stopping`: `BestEpoch.state`,
        `weight_average`: the fit's moving average of the weights."""
        if self.run_dir is None:
            return
        average = None if weight_average is None else weight_average.state()
        loop = (self.config, scheduler, early_stopping, self.model_summary, average)
        state = capture_training_state(self.strategy, model, optimizer, scaler, where, *loop)
        self.checkpoint = self.run_dir.save(state) if self.strategy.is_main else self.run_dir.checkpoint_path
