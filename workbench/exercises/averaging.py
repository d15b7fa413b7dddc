"""Notebook 02's weight-averaging exercise: the moving average that ``TrainConfig(ema_decay=...)`` keeps.

A learner's function ``ema_update(average, weights, decay, updates)`` moves the tensor `average` toward
`weights` in place, for the update after `updates` earlier ones, with the warm-up the Trainer uses (the decay
is at most ``(1 + updates) / (10 + updates)``). `check_weight_average` feeds it the weights of a few made-up
trainings and compares its average, step by step, with the Trainer's own (`WeightAverage`, driven on a model
holding the same weights), naming the usual slips.

Example:
    >>> def ema_update(average, weights, decay, updates):
    ...     rate = min(decay, (1 + updates) / (10 + updates))
    ...     average.mul_(rate).add_(weights, alpha=1 - rate)
    >>> print(check_weight_average(ema_update))
    ema_update matches the Trainer's ema_decay average at every step of 3 runs
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from workbench.exercises.mismatch import ExerciseMismatch, learners_code
from workbench.exercises.waiting import waits_for_learner
from workbench.train.strategy import SingleDevice
from workbench.train.weight_average import WARMUP, WeightAverage, decay_after

TOLERANCE = 1e-5
RUNS = ((0.99, 60), (0.9, 40), (0.5, 10))  # (decay, steps)
_HINT = (
    f"the decay of the update after n earlier ones is min(decay, (1 + n) / ({WARMUP} + n)), and the average "
    "keeps that share of itself: average ← rate · average + (1 − rate) · weights, in place"
)


@waits_for_learner
def check_weight_average(ema_update: Callable[[torch.Tensor, torch.Tensor, float, int], None]) -> str:
    """Run ``ema_update(average, weights, decay, updates)`` over the steps of `RUNS` (weights that drift and
    jitter, as training's do); raise `ExerciseMismatch` at the first step where the average differs from
    the Trainer's."""
    name = getattr(ema_update, "__name__", "ema_update")
    for run, (decay, steps) in enumerate(RUNS):
        generator = torch.Generator().manual_seed(run)
        model = torch.nn.Linear(4, 3, bias=False)
        trainer_average = WeightAverage(decay, model, SingleDevice("cpu"))
        trainer_average.start(None)
        average = model.weight.detach().clone()
        for updates in range(steps):
            with torch.no_grad():
                model.weight.add_(0.1 + 0.05 * torch.randn(3, 4, generator=generator))  # drift and noise
            trainer_average.update()
            weights = model.weight.detach().clone()
            before = average.clone()
            call = f"{name}(average, weights, decay={decay}, updates={updates})"
            with learners_code(call, _HINT):
                ema_update(average, weights, decay, updates)
            with trainer_average.applied():
                want = model.weight.detach().clone()
            if not torch.allclose(average, want, rtol=0, atol=TOLERANCE):
                gap = (average - want).abs().max().item()
                slip = _diagnose(average, before, weights, decay, updates)
                said = f"after {call} the average differs from the Trainer's by up to {gap:.3g}{slip}"
                raise ExerciseMismatch(f"{said}. Hint: {_HINT}")
    return f"{name} matches the Trainer's ema_decay average at every step of {len(RUNS)} runs"


def _diagnose(
    got: torch.Tensor, before: torch.Tensor, weights: torch.Tensor, decay: float, updates: int
) -> str:
    """Name the slip when `got` is one of the usual wrong answers for this update."""
    rate = decay_after(decay, updates)
    slips = {
        "unchanged: update `average` in place (average.mul_(...).add_(...), or average[:] = ...)": before,
        "the average without its warm-up (rate = decay from the first update): it remembers the start for "
        "about 1 / (1 − decay) steps": decay * before + (1 - decay) * weights,
        "the shares swapped: the rate weighs the old average, 1 − rate the new weights": (1 - rate) * before
        + rate * weights,
    }
    for slip, value in slips.items():
        if torch.allclose(got, value, rtol=0, atol=TOLERANCE):
            return f": that is {slip}"
    return ""
