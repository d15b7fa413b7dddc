"""Optimizers from an `OptimizerConfig`, the learning-rate schedule as a pure function of the step, and each
param group's lr at a step (`GroupLrs`)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch

from workbench.train.config import OptimizerConfig

OptimizerFactory = Callable[[Iterable[torch.nn.Parameter], OptimizerConfig], torch.optim.Optimizer]


def build_optimizer(
    params: Iterable[torch.nn.Parameter], config: OptimizerConfig, *, fused: bool | None = None
) -> torch.optim.Optimizer:
    """The torch optimizer `config` names, at `config.lr`, in torch's fused implementation (one kernel for
    every parameter) where torch has one for the parameters' device and kind, else torch's default.

    torch's default on a CPU updates one parameter at a time; its fused Adam took 0.38 ms a step against
    5.0 ms on `workbench bench trainer`'s MLP (2 cores), the same math to float rounding (parameters within
    2e-8 after 20 steps). Sharded parameters (FSDP's and tensor parallel's DTensors) keep the default.
    `fused` forces the choice (the memory tracer builds, on fake tensors, the optimizer real ones would get).

    Example:
        >>> config = OptimizerConfig("sgd", lr=0.1, momentum=0.9)
        >>> optimizer = build_optimizer(torch.nn.Linear(3, 1).parameters(), config)
        >>> optimizer.defaults["momentum"], optimizer.defaults["fused"]
        (0.9, True)
    """
    params = list(params)
    if config.name == "sgd":
        optimizer_class: type[torch.optim.Optimizer] = torch.optim.SGD
        options: dict[str, Any] = {"momentum": config.momentum, "nesterov": config.nesterov}
    else:
        optimizer_class = torch.optim.Adam if config.name == "adam" else torch.optim.AdamW
        options = {"betas": config.betas}
    options.update(lr=config.lr, weight_decay=config.weight_decay)
    if fused is None:
        fused = plain_tensors(params)
    if fused:
        try:
            return optimizer_class(params, fused=True, **options)
        except RuntimeError:  # no fused kernel for this device or dtype: torch's default below
            pass
    return optimizer_class(params, **options)


def plain_tensors(params: list[Any]) -> bool:
    """Whether every parameter is a plain floating tensor (not a DTensor or another subclass, nor a dict of
    options: a param group)."""
    return all(
        isinstance(p, torch.Tensor) and type(p.data) is torch.Tensor and p.is_floating_point() for p in params
    )


def lr_factor(schedule: str, step: int, total_steps: int, warmup_steps: int = 0) -> float:
    """Multiplier of the peak lr for optimizer step `step` (0-based) of `total_steps`.

    Warm-up rises linearly from 1/(warmup+1) to 1; then ``constant`` stays at 1, ``linear`` and ``cosine``
    fall to 0 at the last step.

    Example:
        >>> [round(lr_factor("cosine", s, 5), 3) for s in range(5)]
        [1.0, 0.854, 0.5, 0.146, 0.0]
        >>> [lr_factor("constant", s, 5, warmup_steps=2) for s in range(3)]
        [0.3333333333333333, 0.6666666666666666, 1.0]
    """
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if schedule == "constant":
        return 1.0
    span = max(total_steps - warmup_steps - 1, 1)
    progress = min((step - warmup_steps) / span, 1.0)
    if schedule == "linear":
        return 1.0 - progress
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(
        f"schedule={schedule!r} is not supported; allowed values: 'constant', 'cosine', 'linear'"
    )


def warn_if_warmup_outlasts(
    config: OptimizerConfig, total_steps: int | None, *, warn: bool = True, stacklevel: int = 2
) -> None:
    """Warn (where `warn`: the main rank) when the warm-up is as long as the fit (`total_steps`, None when
    unknown): the lr never reaches ``config.lr``, and a decaying schedule never starts.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn_if_warmup_outlasts(OptimizerConfig("adam", lr=1e-3, warmup_steps=500), 46)
        >>> str(caught[0].message).split(";")[0]
        "warmup_steps=500 is as long as the fit's 46 optimizer steps: the lr ends at 9.2e-05, never lr=0.001"
    """
    if not warn or total_steps is None or config.warmup_steps < total_steps:
        return
    reached = config.lr * lr_factor(config.schedule, total_steps - 1, total_steps, config.warmup_steps)
    tenth = max(total_steps // 10, 1)
    message = (
        f"warmup_steps={config.warmup_steps} is as long as the fit's {total_steps} optimizer steps: the lr "
        f"ends at {reached:.2g}, never lr={config.lr:g}; lower warmup_steps ({tenth} is 10% of the steps) "
        "or train for more epochs"
    )
    warnings.warn(message, UserWarning, stacklevel=stacklevel)  # the Trainer passes its caller's


class GroupLrs:
    """Each step's lr in every param group: the run's lr (``OptimizerConfig.lr``, which the schedule, its
    warm-up, a dashboard's Apply and a resume move) times the multiple of it the group was built with.

    An `optimizer_factory` may give param groups their own lr (a backbone at ``cfg.lr / 100`` beside a head
    at ``cfg.lr``): each keeps its ratio through warm-up, decay and an Apply, as torch's lr schedulers keep
    each group's ``initial_lr``. One group at least must be at the run's lr (that is the lr the logs, the
    dashboard and config.json show); `check_group_lrs` says so otherwise.

    Example:
        >>> backbone, head = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
        >>> groups = [{"params": backbone.parameters(), "lr": 1e-5}, {"params": head.parameters()}]
        >>> optimizer = torch.optim.SGD(groups, lr=1e-3)
        >>> lrs = GroupLrs(optimizer, OptimizerConfig("sgd", lr=1e-3, schedule="linear"), 3)
        >>> lrs.set(optimizer, step=1, lr=1e-3)  # halfway down the linear schedule
        >>> lrs.now, [group["lr"] for group in optimizer.param_groups]
        (0.0005, [5e-06, 0.0005])
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        config: OptimizerConfig,
        total_steps: int | None,
        warn: bool = True,
    ) -> None:
        """`warn` (the main rank): warn when the warm-up lasts the fit (`warn_if_warmup_outlasts`)."""
        check_group_lrs(optimizer, config.lr)
        warn_if_warmup_outlasts(config, total_steps, warn=warn, stacklevel=6)  # the Trainer's caller
        self.scales = [group["lr"] / config.lr for group in optimizer.param_groups]
        at_lr = (i for i, scale in enumerate(self.scales) if math.isclose(scale, 1.0, rel_tol=1e-9))
        self.reference = next(at_lr)  # a group at the run's lr: the one whose lr the logs show
        self.config, self.total_steps = config, total_steps or 0
        self.now = config.lr  # the run's lr at the last step set: what a logged step reports

    def set(self, optimizer: torch.optim.Optimizer, step: int, lr: float) -> None:
        """Give the groups their lrs for optimizer step `step` (0-based) at the run's peak lr `lr`; a group
        added after the optimizer was built takes the run's lr."""
        schedule = self.config
        self.now = lr * lr_factor(schedule.schedule, step, self.total_steps, schedule.warmup_steps)
        for index, group in enumerate(optimizer.param_groups):
            group["lr"] = self.now * (self.scales[index] if index < len(self.scales) else 1.0)

    def step_optimizer(self, optimizer: torch.optim.Optimizer, scaler: Any, step: int, lr: float) -> None:
        """Optimizer step `step` (0-based) at the groups' lrs for it (`set`), through the fp16 `scaler`."""
        self.set(optimizer, step, lr)
        optimizer_step(optimizer, scaler)
        self.stepped()

    def begin(
        self, optimizer: torch.optim.Optimizer, resumed: Any, lr: float, evaluate: Callable[[], dict]
    ) -> None:
        """A fit begins at the run's lr `lr`: fresh (`resumed` None) or from a checkpoint (its `ResumedState`;
        `evaluate` gives val's metrics, should a scheduler need them)."""
        if resumed is None:
            self.start(optimizer, lr)
        else:
            self.resume(optimizer, resumed, evaluate)

    # What a torch scheduler does at these points (`workbench.train.lr_scheduler.TorchSchedule`); this
    # schedule is a function of the step alone, so it keeps nothing and needs none of them.

    def start(self, optimizer: torch.optim.Optimizer, lr: float) -> None:
        """A fresh fit at the run's lr `lr`."""

    def stepped(self) -> None:
        """After an optimizer step."""

    def evaluated(self, step: int, val: dict[str, float]) -> None:
        """After a val evaluation that followed optimizer step `step` (`val`: its metrics)."""

    def epoch_done(self, val: dict[str, float]) -> None:
        """After an epoch and its val evaluation (`val`: its metrics)."""

    def described(self) -> dict[str, Any] | None:
        """What config.json says of a torch scheduler: nothing, the config holds this schedule."""
        return None

    def state(self) -> dict[str, Any] | None:
        """What a checkpoint keeps of the schedule: nothing, the config has it."""
        return None

    def resume(self, optimizer: torch.optim.Optimizer, resumed: Any, evaluate: Callable[[], dict]) -> None:
        """A resumed fit (`resumed`: its `ResumedState`); refused if a torch scheduler wrote the state."""
        if (saved := resumed.scheduler) is not None:
            raise ValueError(
                f"cannot resume from this checkpoint: it was trained with scheduler {saved['kind']} (every="
                f"{saved['every']!r}), whose lrs the config's schedule would replace; give the Trainer the "
                "same scheduler=LrScheduler(...) to go on, or start a new run"
            )


def check_group_lrs(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """ValueError when no param group of `optimizer` (an `optimizer_factory`'s) is at the run's `lr`: the
    factory set an lr of its own that the logs, the dashboard and config.json would not show."""
    built = [group["lr"] for group in optimizer.param_groups]
    if any(isinstance(got, int | float) and math.isclose(got, lr, rel_tol=1e-9) for got in built):
        return
    if any(not isinstance(got, int | float) or got <= 0 for got in built):
        raise ValueError(
            f"optimizer_factory built {type(optimizer).__name__} with lr {built} in its param groups; give "
            "each group a number > 0: lr=cfg.lr, or a multiple of it such as cfg.lr / 10"
        )
    name = type(optimizer).__name__
    if len(set(built)) == 1:
        said = f"lr={built[0]:g} (every param group)"
        fix = f"Build it with lr=cfg.lr and set the lr in the config: OptimizerConfig(lr={built[0]:g})"
    else:
        top = max(built)
        said = f"param groups at lr {', '.join(f'{got:g}' for got in built)}"
        fix = (
            f"Set the config's lr to one group's, OptimizerConfig(lr={top:g}), and build the groups at "
            f"multiples of cfg.lr: {{'params': ..., 'lr': cfg.lr * {min(built) / top:g}}}"
        )
    raise ValueError(
        f"optimizer_factory built {name} with {said}, but the run's lr is the config's lr={lr:g} (cfg.lr): "
        "the schedule, the logs, the dashboard and config.json go by it, and each param group keeps its lr "
        f"as a multiple of it. {fix}"
    )


def optimizer_step(optimizer: torch.optim.Optimizer, scaler: Any) -> None:
    """One update at the lrs the param groups hold, through the fp16 gradient `scaler` when there is one."""
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
