"""Notebook 09's exercise: a training run with one phase planted slow; read the breakdown and name it.

`planted_trainer(model, loss_fn, splits, config, seed)` builds a `Trainer` in which every step spends a few
extra milliseconds in one phase, chosen by `seed` and not shown: the loader (**data**: each sample is slow
to read), the model (**forward**) or the optimizer (**optimizer**). The learner looks at the step-time
breakdown and names the phase; `check_slowest_phase(answer, trainer, medians)` says whether that is the
phase the measurement shows largest and, once it is, what was planted.
"""

from __future__ import annotations

import functools
import random
import time
from typing import Any

import torch
from torch.utils.data import Dataset

from workbench.data import as_splits
from workbench.exercises.mismatch import ExerciseMismatch
from workbench.train import Trainer
from workbench.train.config import OptimizerConfig, TrainConfig
from workbench.train.optim import build_optimizer
from workbench.train.step_time import PHASES

PLANTED = ("data", "forward", "optimizer")
SLOW_S = 0.004  # per step in the model or optimizer; the loader's is spread over the batch's samples


class _SlowSamples(Dataset):
    """The same samples, each slow to read (a slow disk, a heavy decode)."""

    def __init__(self, data: Any, per_sample_s: float) -> None:
        self.features, self.targets, self.per_sample_s = data.features, data.targets, per_sample_s

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> Any:
        time.sleep(self.per_sample_s)
        return self.features[index], self.targets[index]


class _SlowForward(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, slow_s: float) -> None:
        super().__init__()
        self.model, self.slow_s = model, slow_s

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(self.slow_s)
        return self.model(*args, **kwargs)


def _slow_optimizer(params: Any, config: OptimizerConfig, slow_s: float) -> torch.optim.Optimizer:
    optimizer = build_optimizer(params, config)
    step = optimizer.step

    def slow_step(*args: Any, **kwargs: Any) -> Any:
        time.sleep(slow_s)
        return step(*args, **kwargs)

    optimizer.step = slow_step  # type: ignore[method-assign]
    return optimizer


def planted_trainer(
    model: torch.nn.Module,
    loss_fn: Any,
    splits: Any,
    config: TrainConfig,
    seed: int,
    *,
    slow_s: float = SLOW_S,
    **options: Any,
) -> Trainer:
    """A `Trainer` whose every step is `slow_s` seconds slower in one phase (chosen by `seed`;
    ``trainer.planted`` names it); `options` go to the Trainer."""
    planted = PLANTED[random.Random(seed).randrange(len(PLANTED))]
    parts = as_splits(splits)
    if planted == "data":
        slow = _SlowSamples(parts.train, slow_s / config.batch_size)
        parts = as_splits({"train": slow, "val": parts.val, "test": parts.test})
    if planted == "forward":
        model = _SlowForward(model, slow_s)
    factory = functools.partial(_slow_optimizer, slow_s=slow_s) if planted == "optimizer" else None
    trainer = Trainer(model, loss_fn, parts, config, optimizer_factory=factory, **options)
    trainer.planted = planted  # type: ignore[attr-defined]
    return trainer


def check_slowest_phase(answer: object, trainer: Trainer, medians: dict[str, float]) -> str:
    """`answer` must be the phase with the largest median (ms per step) in `medians`; ``...`` (the stub)
    is "not attempted yet"."""
    if answer is Ellipsis:
        return f"not attempted yet: set slowest to one of {', '.join(PHASES)} above, then run this cell again"
    if answer not in PHASES:
        raise ExerciseMismatch(f"answer {answer!r} is not a phase; the phases are {', '.join(PHASES)}")
    slowest = max(PHASES, key=lambda phase: medians[phase])
    if answer != slowest:
        raise ExerciseMismatch(
            f"{answer} takes {medians[answer]:.2f} ms of a step (median), {slowest} "
            f"{medians[slowest]:.2f} ms: look for the largest bar"
        )
    planted = getattr(trainer, "planted", "?")
    return (
        f"right: {slowest} takes {medians[slowest]:.2f} of the step's {medians['total']:.2f} ms; what was "
        f"planted: a slow {dict(data='loader', forward='model', optimizer='optimizer step')[planted]}"
    )
