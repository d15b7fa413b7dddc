"""The learning-rate range test (Leslie Smith's; fastai's ``lr_find``, Lightning's ``Tuner.lr_find``): train
a few steps with the lr growing exponentially from tiny to huge, watch the loss, pick an lr where it falls
fastest. `find_lr` runs it through the `Trainer` (so on your device, precision, strategy and batches) and
puts the model's weights back afterwards; `LrRange` is what it saw; ``workbench.widgets.lr_range_figure``
draws it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

from workbench._smoothing import ema
from workbench._validate import check_int
from workbench.data import Splits, as_splits
from workbench.train.config import TrainConfig
from workbench.train.control import TrainControl
from workbench.train.events import Callback
from workbench.train.loop import Trainer
from workbench.train.loss_check import NonFiniteLossError
from workbench.train.lr_scheduler import LrScheduler

SMOOTHING = 0.98  # the loss curve's exponential moving average (bias-corrected), as fastai and Lightning


@dataclass(frozen=True)
class LrRange:
    """What a range test saw: per step the lr it used, the loss, and that loss smoothed.

    Attributes:
        lrs, losses, smoothed: one value per step, in order (the lr grows by the same factor each step).
        steepest: the lr where the smoothed loss falls fastest (per decade of lr) before its lowest point, or
            None when it never fell there (`reason` says why).
        ended: why the test ended: ``"reached end_lr"``, ``"diverged"`` (the smoothed loss passed
            ``diverge`` × its lowest) or ``"non-finite loss"``.
        reason: where `steepest` is None, why.

    `suggestion` is `steepest`, or a tenth of `lowest_lr` where that is lower: the smoothing lags the loss, so
    on a short test the steepest fall of the smoothed curve can sit near the edge (SGD on the digits, batch
    256: steepest 1.29, which does not train; a tenth of the lowest, 0.39, does).

    Example:
        >>> losses = [2.0, 1.9, 1.6, 1.0, 0.5, 0.4, 0.6, 3.0]
        >>> result = LrRange.of([10.0**e for e in range(-6, 2)], losses, "diverged")
        >>> result.steepest, result.lowest_lr, result.suggestion
        (0.001, 1.0, 0.001)
        >>> print(result)  # doctest: +NORMALIZE_WHITESPACE
        lr range test: 8 steps, lr 1e-06 to 10 (diverged); the smoothed loss fell fastest at lr 0.001 and was
        lowest at lr 1: try lr 0.001
    """

    lrs: tuple[float, ...]
    losses: tuple[float, ...]
    smoothed: tuple[float, ...]
    steepest: float | None
    ended: str
    reason: str = ""

    @classmethod
    def of(cls, lrs: Sequence[float], losses: Sequence[float], ended: str) -> LrRange:
        """The range test's record from its lrs and losses: smoothed, with its steepest fall."""
        smoothed = smooth(losses)
        index, reason = steepest_fall(lrs, smoothed)
        steepest = None if index is None else float(lrs[index])
        return cls(tuple(map(float, lrs)), tuple(map(float, losses)), smoothed, steepest, ended, reason)

    @property
    def lowest_lr(self) -> float | None:
        """The lr at the smoothed loss's lowest point (None for an empty test)."""
        if not self.smoothed:
            return None
        return self.lrs[min(range(len(self.smoothed)), key=self.smoothed.__getitem__)]

    @property
    def suggestion(self) -> float | None:
        """The lr to train at: `steepest`, or a tenth of `lowest_lr` where that is lower; None without a
        steepest fall."""
        if self.steepest is None or self.lowest_lr is None:
            return None
        return min(self.steepest, self.lowest_lr / 10)

    def __str__(self) -> str:
        if not self.lrs:
            return f"lr range test: no step ran ({self.ended})"
        span = f"lr {self.lrs[0]:.3g} to {self.lrs[-1]:.3g}"
        head = f"lr range test: {len(self.lrs)} steps, {span} ({self.ended})"
        if self.suggestion is None:
            return f"{head}; no suggestion: {self.reason}"
        capped = " (a tenth of the lowest's)" if self.suggestion < self.steepest else ""
        return (
            f"{head}; the smoothed loss fell fastest at lr {self.steepest:.3g} and was lowest at lr "
            f"{self.lowest_lr:.3g}: try lr {self.suggestion:.3g}{capped}"
        )


def smooth(losses: Sequence[float]) -> tuple[float, ...]:
    """`losses` through the range test's moving average (`ema` at `SMOOTHING`, debiased: it starts at the
    first loss)."""
    return tuple(ema(losses, SMOOTHING).tolist())


def steepest_fall(lrs: Sequence[float], smoothed: Sequence[float]) -> tuple[int | None, str]:
    """(index of `smoothed`'s steepest fall per decade of lr before its lowest point, ""), or (None, why).

    The first tenth of the steps is left out (the average is still settling there)."""
    lowest = min(range(len(smoothed)), key=smoothed.__getitem__) if smoothed else 0
    first = max(1, len(smoothed) // 10)
    if lowest - first < 2:
        return None, (
            f"the smoothed loss was lowest at step {lowest + 1} of {len(smoothed)}, too early to see it "
            "fall: start_lr may already be too high (try a lower one) or the test too short (more steps)"
        )
    decades = [math.log10(lr) for lr in lrs]
    fall = {i: smoothed[i + 1] - smoothed[i - 1] for i in range(first, lowest)}
    slopes = {i: change / (decades[i + 1] - decades[i - 1]) for i, change in fall.items()}
    index = min(slopes, key=slopes.__getitem__)
    if slopes[index] >= 0:
        return None, "the smoothed loss never fell before its lowest point"
    return index, ""


class _Recorder(Callback):
    """Each logged step's lr and loss; asks the loop to stop once the smoothed loss passes `diverge` × its
    lowest. Every rank hears the same loss (averaged over ranks), so every rank stops at the same step."""

    def __init__(self, control: TrainControl, diverge: float) -> None:
        self.control, self.diverge = control, diverge
        self.lrs: list[float] = []
        self.losses: list[float] = []
        self.diverged = False

    def on_step(self, metrics: dict[str, Any]) -> None:
        self.lrs.append(metrics["lr"])
        self.losses.append(metrics["loss"])
        smoothed = smooth(self.losses)
        lowest = min(smoothed)  # a loss that can be 0 or below (a log-likelihood) stops on NaN/inf only
        if len(smoothed) > 1 and lowest > 0 and smoothed[-1] > self.diverge * lowest:
            self.diverged = True
            self.control.stop()


def find_lr(
    model: torch.nn.Module,
    loss_fn: Callable[..., torch.Tensor] | None,
    splits: Any,
    config: TrainConfig | None = None,
    *,
    start_lr: float = 1e-7,
    end_lr: float = 10.0,
    steps: int = 100,
    diverge: float = 4.0,
    **trainer_options: Any,
) -> LrRange:
    """Train `steps` steps on the training split with the lr growing exponentially from `start_lr` to `end_lr`
    (ending early once the smoothed loss passes `diverge` × its lowest, or is NaN/inf), then put the model's
    weights and buffers back; what it saw, with a suggested lr.

    Args:
        model, loss_fn, splits, config: as for `Trainer` (its optimizer, batch size, precision, device and
            accumulation are the test's; its lr, schedule, epochs, evaluation and early stopping are not).
        start_lr, end_lr: the lr of the first and last step, 0 < start_lr < end_lr.
        steps: optimizer steps at most, ≥ 5 (about 100 is usual).
        diverge: end once the smoothed loss exceeds this many times its lowest, > 1 (for a loss that stays
            above 0; one that can reach 0 or below ends on NaN/inf or at `end_lr`).
        trainer_options: more `Trainer` keywords: ``step_fn``, ``strategy`` (in a `launch`, every rank runs
            the same test and gets the same result; a sharded or pipelined model is put back as a checkpoint
            loads it), ``optimizer_factory``, ``callbacks`` (a `LossPlot` draws the test live), ``progress``.

    Example:
        >>> import torch.nn.functional as F
        >>> from torch.utils.data import TensorDataset
        >>> from workbench.train import OptimizerConfig
        >>> torch.manual_seed(0) and None
        >>> data = TensorDataset(x := torch.randn(512, 8), (x.sum(dim=1) > 0).long())
        >>> model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
        >>> before = [p.clone() for p in model.parameters()]
        >>> config = TrainConfig(batch_size=32, optimizer=OptimizerConfig("sgd", lr=0.1, momentum=0.9))
        >>> result = find_lr(model, F.cross_entropy, data, config, progress=False)
        >>> result.ended, 1e-4 < result.suggestion < 1.0
        ('diverged', True)
        >>> all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the weights are back
        True
    """
    check_int("steps", steps, minimum=5)
    if not (_positive(start_lr) and _positive(end_lr) and start_lr < end_lr):
        raise ValueError(
            f"start_lr and end_lr must be numbers with 0 < start_lr < end_lr, got start_lr={start_lr!r}, "
            f"end_lr={end_lr!r}; e.g. find_lr(..., start_lr=1e-7, end_lr=10)"
        )
    if not _positive(diverge) or diverge <= 1:
        raise ValueError(f"diverge must be a number > 1 (times the lowest smoothed loss), got {diverge!r}")
    refused = {"run", "scheduler", "control", "metrics", "overwrite", "runs_dir"}
    taken = sorted(refused & trainer_options.keys())
    if taken:
        raise TypeError(
            f"find_lr takes no {', '.join(taken)}: the range test writes no run, sets the lr itself and "
            "evaluates nothing; pass those to the Trainer you train with afterwards"
        )
    base = config if config is not None else TrainConfig()
    test_config = base.replace(
        max_steps=steps,
        log_every=1,
        eval_every_steps=None,
        checkpoint_every_steps=None,
        early_stopping=None,
        ema_decay=None,  # nothing is evaluated, and the weights go back
        optimizer=dataclasses.replace(base.optimizer, lr=start_lr, schedule="constant", warmup_steps=0),
    )
    growth = (end_lr / start_lr) ** (1 / (steps - 1))
    scheduler = LrScheduler(lambda optimizer, plan: LambdaLR(optimizer, lambda step: growth**step), "step")
    control = TrainControl()
    recorder = _Recorder(control, diverge)
    callbacks = [recorder, *trainer_options.pop("callbacks", ())]
    train_only = Splits(as_splits(splits).train)
    trainer = Trainer(
        model, loss_fn, train_only, test_config, scheduler=scheduler, control=control, callbacks=callbacks,
        **trainer_options,
    )  # fmt: skip
    kept = _whole_state(trainer)
    ended = "reached end_lr"
    try:
        trainer.fit()
        ended = "diverged" if recorder.diverged else ended
    except NonFiniteLossError:  # every rank raises it at the same step: the loss is summed over ranks
        ended = "non-finite loss"
    except BaseException:
        if trainer.world_size == 1:  # another rank may be gone: putting a sharded model back is collective
            trainer.strategy.load_model_state(trainer.model, kept)
        raise
    trainer.strategy.load_model_state(trainer.model, kept)
    return LrRange.of(recorder.lrs, recorder.losses, ended)


def _whole_state(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The model's whole state (weights and buffers, as a checkpoint holds it), copied to the CPU, on every
    rank: what `load_model_state` puts back, for a sharded or pipelined model too."""
    state = trainer.strategy.model_state(trainer.model)  # whole on rank 0; may share the live tensors
    main = trainer.strategy.is_main and state is not None
    copied = {name: value.detach().to("cpu", copy=True) for name, value in state.items()} if main else None
    return trainer.strategy.gather_object(copied)[0]


def _positive(value: object) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0
