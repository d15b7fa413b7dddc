"""Your own torch lr scheduler in a fit: ``Trainer(..., scheduler=LrScheduler(factory, every="step"))``.

The Trainer builds the optimizer (on the parameters it trains, which DDP and FSDP wrap first), so it builds
the scheduler on it too, from ``factory(optimizer, plan)``; `FitPlan` says how long the fit is and at what
lr it runs. ``every="step"`` steps the scheduler after every optimizer step (OneCycleLR, a warm-up
LambdaLR, CosineAnnealingLR over ``plan.steps``); ``every="epoch"`` after every epoch's val evaluation
(MultiStepLR with milestones in epochs, ReduceLROnPlateau on a val metric, ``monitor=``); ``every="eval"``
after every val evaluation, those of ``eval_every_steps`` within epochs too (a ReduceLROnPlateau on a long
epoch or a stream, as Hugging Face's Trainer steps it).

What the Trainer's own schedule does, a torch scheduler does too (`TorchSchedule`): the logged lr is the
one each step used; a Dashboard's Apply (and a resume with another lr) scales every lr the scheduler gives
by new / old, as the built-in schedules scale with the peak lr; its state goes into the checkpoint, so a
resume continues it where it was (a longer fit rebuilds it for the new plan, moved to the step it was at).

Example:
    >>> from torch.optim.lr_scheduler import OneCycleLR
    >>> from workbench.presets import build_experiment
    >>> from workbench.train import Trainer
    >>> e = build_experiment("digits-mlp", epochs=2)
    >>> one_cycle = LrScheduler(lambda optimizer, plan: OneCycleLR(optimizer, plan.lr, plan.steps), "step")
    >>> trainer = Trainer(e.model, e.loss_fn, e.splits, e.config, scheduler=one_cycle, progress=False)
    >>> trainer.fit().status, type(trainer.scheduler).__name__
    ('finished', 'OneCycleLR')
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from workbench._validate import check_called_as, check_choice
from workbench.train.batches import fit_epochs, no_epoch_end
from workbench.train.config import TrainConfig
from workbench.train.lr_scheduler_lines import factory_line, is_plateau, kind_name
from workbench.train.optim import GroupLrs

EVERY = ("step", "epoch", "eval")
_LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")  # param-group entries that are lrs (OneCycleLR's too)
_SCHEDULER_LRS = ("base_lrs", "_last_lr", "max_lrs", "min_lrs")  # a scheduler's lists of lrs (CyclicLR's…)
_ORDER_WARNING = r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`"  # fp16's skips


@dataclass(frozen=True)
class FitPlan:
    """What a scheduler's factory knows of the fit it schedules.

    Attributes:
        lr: the run's lr (``OptimizerConfig.lr``); the optimizer's param groups are at it (or at multiples).
        epochs: epochs in the fit (with ``TrainConfig(max_steps=...)``: those its steps reach into, the last
            maybe ended inside; None when the training split has no length).
        steps_per_epoch, steps: optimizer steps in an epoch and in the whole fit (None for a training split
            without a length, an IterableDataset without ``__len__``, unless max_steps gives the fit's).

    Example (a one-cycle schedule over the whole fit, sized from the plan):
        >>> import torch.nn.functional as F
        >>> from torch.optim.lr_scheduler import OneCycleLR
        >>> from torch.utils.data import TensorDataset
        >>> from workbench.train import TrainConfig, Trainer
        >>> plans = []
        >>> def one_cycle(optimizer, plan):
        ...     plans.append(plan)
        ...     return OneCycleLR(optimizer, max_lr=plan.lr, total_steps=plan.steps)
        >>> data = TensorDataset(torch.randn(64, 3), torch.arange(64) % 2)
        >>> _ = Trainer(torch.nn.Linear(3, 2), F.cross_entropy, data, TrainConfig(epochs=2, batch_size=16),
        ...             scheduler=LrScheduler(one_cycle, "step"), progress=False).fit()
        >>> plans[-1]  # the plan of the fit (the Trainer built one when it was made, too)
        FitPlan(lr=0.001, epochs=2, steps_per_epoch=4, steps=8)
    """

    lr: float
    epochs: int | None
    steps_per_epoch: int | None
    steps: int | None


@dataclass(frozen=True)
class LrScheduler:
    """A torch lr scheduler the Trainer builds on its optimizer and steps.

    Args:
        factory: ``factory(optimizer, plan) -> torch.optim.lr_scheduler.LRScheduler``, built on the
            `optimizer` it is given; `plan` is a `FitPlan` (``plan.steps``, ``plan.epochs``, ``plan.lr``).
        every: ``"step"``: the scheduler steps after every optimizer step; ``"epoch"``: after every epoch,
            once val is evaluated; ``"eval"``: after every val evaluation (``TrainConfig(eval_every_steps=N)``
            adds them within epochs). ReduceLROnPlateau steps on a val metric: ``"epoch"`` or ``"eval"``.
        monitor: ReduceLROnPlateau's val metric: ``"loss"`` (the default), ``"accuracy"`` or a name of the
            Trainer's ``metrics=``.

    Example:
        >>> from torch.optim.lr_scheduler import MultiStepLR
        >>> LrScheduler(lambda optimizer, plan: MultiStepLR(optimizer, milestones=[30, 60]), every="epoch").every
        'epoch'
        >>> LrScheduler(MultiStepLR, every="epoch")
        Traceback (most recent call last):
        ...
        TypeError: factory is the class MultiStepLR; give a function that builds it on the Trainer's optimizer: LrScheduler(lambda optimizer, plan: MultiStepLR(optimizer, milestones=...), every='epoch')
    """  # noqa: E501

    factory: Callable[[torch.optim.Optimizer, FitPlan], Any]
    every: str
    monitor: str | None = None

    def __post_init__(self) -> None:
        check_choice("every", self.every, EVERY)
        line = factory_line(self.factory, self.every)
        if isinstance(self.factory, type | LRScheduler):
            name = kind_name(self.factory)
            said = f"the class {name}" if isinstance(self.factory, type) else f"a {name}"
            raise TypeError(
                f"factory is {said}; give a function that builds it on the Trainer's optimizer: {line}"
            )
        if not callable(self.factory):
            raise TypeError(
                f"factory must be a function factory(optimizer, plan) -> a torch lr scheduler, got "
                f"{type(self.factory).__name__}; e.g. {line}"
            )
        check_called_as("factory", self.factory, "factory(optimizer, plan)", f"e.g. {line}")
        if self.monitor is not None and (not isinstance(self.monitor, str) or not self.monitor):
            raise ValueError(f"monitor must be the name of a val metric such as 'loss', got {self.monitor!r}")


def as_lr_scheduler(value: Any) -> LrScheduler | None:
    """`value` given as ``Trainer(scheduler=...)`` as an `LrScheduler` (None: none); TypeError, with the line
    to write, for a scheduler built on an optimizer of yours, its class, a bare function or a name."""
    if value is None or isinstance(value, LrScheduler):
        return value
    if isinstance(value, str):
        raise TypeError(
            f"scheduler={value!r}: the built-in schedules are OptimizerConfig's schedule ('constant', "
            "'cosine', 'linear', with warmup_steps): config=TrainConfig(optimizer=OptimizerConfig(schedule="
            f"{value!r})); scheduler= takes your torch scheduler as LrScheduler(factory, every=...)"
        )
    if isinstance(value, LRScheduler | type):
        name = kind_name(value)
        every = "step" if name in ("OneCycleLR", "CyclicLR") else "epoch"
        owner = "is built on an optimizer of yours" if isinstance(value, LRScheduler) else "is a class"
        hint = "" if every == "step" or is_plateau(value) else " (or every='step': after each batch)"
        raise TypeError(
            f"scheduler={name}(...) {owner}; the Trainer builds the optimizer on the parameters it trains, "
            f"and the scheduler on that optimizer from a function: scheduler={factory_line(value, every)}"
            f"{hint} (workbench.train's LrScheduler; plan.steps and plan.epochs give the fit's length)"
        )
    if callable(value):
        name = getattr(value, "__name__", "factory")
        raise TypeError(
            f"scheduler= takes LrScheduler({name}, every='step', 'epoch' or 'eval'): say whether the "
            "scheduler steps after every optimizer step, every epoch or every val evaluation "
            "(workbench.train's LrScheduler)"
        )
    raise TypeError(f"scheduler must be LrScheduler(factory, every=...) or None, got {type(value).__name__}")


def lr_policy(
    optimizer: torch.optim.Optimizer,
    config: TrainConfig,
    scheduler: Any,
    steps: tuple[int | None, int | None],
    val_metrics: Iterable[str] | None,
    warn: bool = True,
) -> GroupLrs:
    """How the fit sets its lrs: the config's schedule (`GroupLrs`), or `scheduler` (`TorchSchedule`; what
    `as_lr_scheduler` takes). `steps`: optimizer steps per epoch and in the fit; `val_metrics`: the metrics
    val gives (None: no val split)."""
    scheduler = as_lr_scheduler(scheduler)
    if scheduler is None:
        return GroupLrs(optimizer, config.optimizer, steps[1], warn=warn)
    return TorchSchedule(optimizer, config, scheduler, steps, val_metrics, warn=warn)


class TorchSchedule(GroupLrs):
    """A fit's lrs from a torch scheduler (`LrScheduler`): built at the fit's start on the optimizer, stepped
    after each optimizer step or epoch, its lrs scaled by new / old when the run's lr changes (a Dashboard's
    Apply, a resume with another lr), its state kept in checkpoints (`state`, `resume`).

    Raises ValueError when it cannot run as asked: beside the config's own schedule or warm-up, on another
    optimizer than the one it is given, or a ReduceLROnPlateau without a val metric to watch.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        config: TrainConfig,
        spec: LrScheduler,
        steps: tuple[int | None, int | None],
        val_metrics: Iterable[str] | None,
        *,
        warn: bool = True,
    ) -> None:
        schedule = config.optimizer
        if schedule.schedule != "constant" or schedule.warmup_steps:
            raise ValueError(
                f"scheduler= and OptimizerConfig(schedule={schedule.schedule!r}, warmup_steps="
                f"{schedule.warmup_steps}) would both set the lr; keep one: schedule='constant' and "
                "warmup_steps=0 beside your scheduler (a warm-up goes into it: torch's LinearLR in a "
                "SequentialLR), or no scheduler="
            )
        super().__init__(optimizer, schedule, steps[1], warn=False)
        self.spec, self.epochs, self.steps_per_epoch = spec, fit_epochs(config, steps[0]), steps[0]
        self.epochs_stepped = 0  # the epochs (every="epoch") or val evaluations (every="eval") stepped for
        self.judged = 0  # the optimizer step of the last val evaluation an every="eval" scheduler stepped on
        self.scheduler = self._build(optimizer, schedule.lr)
        self.kind = type(self.scheduler).__name__
        self._check_plateau(val_metrics)
        if spec.every == "eval" and val_metrics is None:
            raise ValueError(
                f"every='eval' steps the {self.kind} after each val evaluation, and the data has no val "
                "split: give one, Trainer(model, loss_fn, (train, val), config), or every='epoch'"
            )
        if spec.every == "epoch" and warn and (short := no_epoch_end(config, steps[0])):
            warnings.warn(
                f"the scheduler ({self.kind}, every='epoch') steps at the epochs' ends, and {short}: it "
                "would never step; give every='eval' with eval_every_steps=... (at each val evaluation), "
                "every='step', or fit in epochs",
                stacklevel=5,  # the Trainer's caller
            )

    def _check_plateau(self, val_metrics: Iterable[str] | None) -> None:
        spec, kind = self.spec, self.kind
        if not isinstance(self.scheduler, ReduceLROnPlateau):
            if spec.monitor is not None:
                raise ValueError(
                    f"monitor={spec.monitor!r} is the val metric a ReduceLROnPlateau watches, and the "
                    f"factory built a {kind}, which steps on its own; leave monitor out"
                )
            return
        if spec.every == "step":
            raise ValueError(
                f"{kind} steps on a val metric, which comes with each val evaluation: give every='epoch' (at "
                "the epochs' ends) or every='eval' (every evaluation, eval_every_steps's too)"
            )
        monitor = spec.monitor or "loss"
        if val_metrics is None:
            raise ValueError(
                f"{kind} watches the val split's {monitor} after each epoch, and the data has no val "
                "split: give one, Trainer(model, loss_fn, (train, val), config), or another scheduler"
            )
        known = {"loss", "accuracy", *val_metrics}
        if monitor not in known:
            raise ValueError(
                f"{kind} watches monitor={monitor!r}, which the Trainer does not compute; it computes "
                f"{', '.join(map(repr, sorted(known)))} on val (accuracy for classification)"
            )
        better = {"loss": "min", "accuracy": "max"}.get(monitor)
        if better is not None and self.scheduler.mode != better:
            raise ValueError(
                f"{kind}(mode={self.scheduler.mode!r}) watches val {monitor}, for which "
                f"{'lower' if better == 'min' else 'higher'} is better: build it with mode={better!r}, or "
                f"give monitor={'accuracy' if better == 'min' else 'loss'!r} (or a name of your metrics=)"
            )

    def _build(self, optimizer: torch.optim.Optimizer, lr: float) -> LRScheduler:
        """The factory's scheduler on `optimizer`, its groups set back to their multiples of `lr` first."""
        for scale, group in zip(self.scales, optimizer.param_groups, strict=False):
            group.pop("initial_lr", None)  # a scheduler built before (an earlier fit's) left it
            group["lr"] = scale * lr
        plan = FitPlan(lr, self.epochs, self.steps_per_epoch, self.total_steps or None)
        try:
            scheduler = self.spec.factory(optimizer, plan)
        except Exception as error:
            if plan.steps is None:  # the factory's own traceback, with why its length is missing
                error.add_note(
                    "the fit's length is unknown (a training split without __len__, an IterableDataset), so "
                    "plan.steps and plan.steps_per_epoch are None: give the dataset a __len__, or a scheduler"
                    " that needs no length"
                )
            raise
        if not isinstance(scheduler, LRScheduler):
            raise TypeError(
                f"the scheduler's factory returned {type(scheduler).__name__}, not a torch lr scheduler; "
                "return one built on the optimizer it is given: lambda optimizer, plan: "
                "torch.optim.lr_scheduler.OneCycleLR(optimizer, plan.lr, plan.steps)"
            )
        if scheduler.optimizer is not optimizer:
            raise ValueError(
                f"the scheduler's factory built a {type(scheduler).__name__} on another optimizer than the "
                "one it was given; build it on the factory's first argument, the optimizer the Trainer steps"
            )
        self.peak, self.now = lr, optimizer.param_groups[self.reference]["lr"]
        return scheduler

    def start(self, optimizer: torch.optim.Optimizer, lr: float) -> None:
        """A fresh fit at the run's lr `lr`: the scheduler built anew (an earlier fit left it at its end)."""
        self.scheduler, self.epochs_stepped, self.judged = self._build(optimizer, lr), 0, 0

    def set(self, optimizer: torch.optim.Optimizer, step: int, lr: float) -> None:
        """Before optimizer step `step`: scale the schedule by `lr` / the run's lr so far when they differ."""
        if lr != self.peak:
            _scale_lrs(optimizer, self.scheduler, lr / self.peak)
            self.peak = lr
        self.now = optimizer.param_groups[self.reference]["lr"]

    def stepped(self) -> None:
        """After an optimizer step."""
        if self.spec.every == "step":
            self._step()

    def evaluated(self, step: int, val: dict[str, float]) -> None:
        """After a val evaluation that followed optimizer step `step` (`val`: its metrics)."""
        if self.spec.every == "eval" and self._step_on(val):
            self.epochs_stepped, self.judged = self.epochs_stepped + 1, step

    def epoch_done(self, val: dict[str, float]) -> None:
        """After an epoch and its val evaluation (`val`: its metrics)."""
        if self.spec.every == "epoch" and self._step_on(val):
            self.epochs_stepped += 1

    def _step_on(self, val: dict[str, float]) -> bool:
        """Step at a val evaluation (a ReduceLROnPlateau on its `monitor`); False when there is nothing to
        judge by (an empty val shard evaluated nothing)."""
        if not isinstance(self.scheduler, ReduceLROnPlateau):
            self._step()
            return True
        monitor = self.spec.monitor or "loss"
        if not val:
            return False
        if monitor not in val:
            raise ValueError(
                f"{self.kind} watches monitor={monitor!r}, and val gave only {', '.join(map(repr, val))} "
                "(accuracy is computed for classification only); give monitor='loss'"
            )
        self._step(float(val[monitor]))
        return True

    def _step(self, *metric: float) -> None:
        with warnings.catch_warnings():  # fp16's scaler skips a step when its gradients overflowed
            warnings.filterwarnings("ignore", _ORDER_WARNING, UserWarning)
            try:
                self.scheduler.step(*metric)
            except ValueError as error:  # OneCycleLR: "Tried to step 11 times…"
                raise ValueError(
                    f"{self.kind}.step() failed after {self.spec.every} {self._count()}: {error}; build it "
                    f"for the fit's length (plan.steps = {self.total_steps or None}, plan.epochs = "
                    f"{self.epochs})"
                ) from None

    def _count(self) -> int:
        return int(getattr(self.scheduler, "last_epoch", 0))

    def described(self) -> dict[str, Any]:
        """What config.json says of it: its kind, when it steps and what a plateau watches."""
        watched = (
            {"monitor": self.spec.monitor or "loss"} if isinstance(self.scheduler, ReduceLROnPlateau) else {}
        )
        return {"kind": self.kind, "every": self.spec.every, **watched}

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of it."""
        return {
            "kind": self.kind,
            "every": self.spec.every,
            "plan": [self.total_steps or None, self.epochs],
            "epochs_stepped": self.epochs_stepped,
            "judged": self.judged,
            "state": self.scheduler.state_dict(),
        }

    def resume(self, optimizer: torch.optim.Optimizer, resumed: Any, evaluate: Callable[[], dict]) -> None:
        """Go on with the scheduler a checkpoint kept (`resumed`: its `ResumedState`, the optimizer already
        loaded): as it was, or, for a fit that grew longer, rebuilt for the new plan and stepped to where it
        was. An every="epoch" scheduler saved before its epoch's step (checkpoints precede val) takes it now,
        on val evaluated again (`evaluate`) when it watches a metric."""
        saved = resumed.scheduler
        if saved is None:
            raise ValueError(
                f"cannot resume from this checkpoint with scheduler= ({self.kind}): it was trained without "
                "one, on OptimizerConfig's schedule; resume without scheduler=, or start a new run"
            )
        if (saved.get("kind"), saved.get("every")) != (self.kind, self.spec.every):
            raise ValueError(
                f"cannot resume from this checkpoint: it was trained with scheduler {saved.get('kind')} "
                f"(every={saved.get('every')!r}), and this Trainer has {self.kind} (every="
                f"{self.spec.every!r}); give the same scheduler= to go on, or start a new run"
            )
        kept = [
            {key: value for key, value in group.items() if key != "params"}
            for group in optimizer.param_groups
        ]
        self.scheduler = self._build(optimizer, resumed.lr_at_save)
        plan = [self.total_steps or None, self.epochs]
        if list(saved["plan"]) == plan or isinstance(self.scheduler, ReduceLROnPlateau):
            for group, values in zip(optimizer.param_groups, kept, strict=False):
                group.update(values)  # the loaded lrs (and OneCycleLR's momentum), which _build reset
            self.scheduler.load_state_dict(saved["state"])
            self.epochs_stepped = int(saved["epochs_stepped"])
        else:  # epochs grew: the scheduler built for the longer fit, moved to where the saved one was
            moves = resumed.where.step if self.spec.every == "step" else int(saved["epochs_stepped"])
            for _ in range(moves):
                self._step()
            self.epochs_stepped = 0 if self.spec.every == "step" else moves
            warnings.warn(
                f"the checkpoint's {self.kind} was built for {saved['plan'][0]} steps in {saved['plan'][1]} "
                f"epochs, and this fit has {plan[0]} in {plan[1]}: it was built again for them and moved "
                f"{moves} {self.spec.every}s on, so the lr follows the longer plan from here",
                UserWarning,
                stacklevel=6,  # the fit(resume=...) call: past begin, _start, _fit and fit
            )
        self.judged = int(saved.get("judged", 0))
        self.now = optimizer.param_groups[self.reference]["lr"]
        judge = evaluate if isinstance(self.scheduler, ReduceLROnPlateau) else dict
        if self.spec.every == "epoch" and self.epochs_stepped < resumed.where.epoch:
            self.epoch_done(judge())
        if self.spec.every == "eval" and resumed.val_follows and self.judged < resumed.where.step:
            self.evaluated(resumed.where.step, judge())  # the val evaluated right after the save


def _scale_lrs(optimizer: torch.optim.Optimizer, scheduler: LRScheduler, ratio: float) -> None:
    """Every lr `scheduler` gives, from now on, times `ratio`: the param groups' lrs (and the initial, peak
    and floor lrs schedulers keep there) and the scheduler's own (those of a SequentialLR's parts too)."""
    for group in optimizer.param_groups:
        for key in _LR_KEYS:
            if isinstance(group.get(key), float | int) and not isinstance(group.get(key), bool):
                group[key] *= ratio
    schedulers = [scheduler]
    while schedulers:
        part = schedulers.pop()
        for name in _SCHEDULER_LRS:
            if isinstance(getattr(part, name, None), list):
                setattr(part, name, [lr * ratio for lr in getattr(part, name)])
        if isinstance(getattr(part, "eta_min", None), float | int):
            part.eta_min *= ratio
        schedulers.extend(getattr(part, "_schedulers", []))
