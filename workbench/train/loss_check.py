"""The NaN/inf guard: one sync per logged step checks every loss since the last one, on every rank."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from workbench.data.batch import describe_batch, named_tensors
from workbench.train.control import Settings
from workbench.train.log_window import LogWindow
from workbench.train.strategy import Strategy


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; training stopped before the optimizer step.

    Example (one sample holds a NaN):
        >>> import torch, torch.nn.functional as F
        >>> from torch.utils.data import TensorDataset
        >>> from workbench.train import TrainConfig, Trainer
        >>> x = torch.randn(64, 3)
        >>> x[5, 0] = float("nan")
        >>> trainer = Trainer(torch.nn.Linear(3, 2), F.cross_entropy, TensorDataset(x, torch.arange(64) % 2),
        ...                   TrainConfig(epochs=1, batch_size=16), progress=False)
        >>> trainer.fit()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        workbench.train.loss_check.NonFiniteLossError: training loss became nan in steps 1-4 ...
    """


def loss_sum_over_ranks(strategy: Strategy, total: torch.Tensor, asked: bool = False) -> tuple[float, bool]:
    """`total` (this rank's loss sum) averaged over the shards of the data, as a float on every rank, and
    whether any rank `asked` to stop (`TrainControl.ask_stop`), in the same sum.

    Ranks that share a shard with a reporting rank add 0. NaN and inf survive the sum, so every rank sees
    a NaN on any rank and all stop at the same step.
    """
    if strategy.world_size == 1:
        return float(total), asked
    mine = total.detach().float().reshape(1) if strategy.reports_loss else torch.zeros(1, device=total.device)
    summed = strategy.all_reduce(torch.cat([mine, torch.full_like(mine, float(asked))]), "sum").tolist()
    return summed[0] / strategy.data_world_size, summed[1] > 0


def non_finite_message(
    value: float,
    first: int,
    last: int,
    *,
    epoch: int,
    checkpoint: Path | None,
    lr: float,
    clip_norm: float,
    precision: str,
    bad_data: str | None = None,
) -> str:
    """What `NonFiniteLossError` says: where the loss went bad, what was kept, what to try (the data, when
    `bad_data` says the step's batch holds NaN or inf: `non_finite_data`; else the lr, clipping, precision).

    Example:
        >>> message = non_finite_message(
        ...     float("inf"), 3, 3, epoch=0, checkpoint=None, lr=1.2, clip_norm=0, precision="fp32"
        ... )
        >>> message.split("; ")[0]
        'training loss became inf at step 3, epoch 0'
        >>> message.split(". ")[-1]
        'Try a lower lr (now 1.2) or clipping (clip_norm).'
    """
    where = f"at step {last}" if first == last else f"in steps {first}-{last} (checked every log_every)"
    kept = (
        f"the last good checkpoint {checkpoint} is kept"
        if checkpoint is not None
        else "no checkpoint was written before it"
    )
    if first == last:
        memory = f"the model in memory holds the weights after step {last - 1}"
    else:  # the steps before the check already updated the weights, possibly from a non-finite loss
        before = f"step {first}" if first == last - 1 else f"steps {first}-{last - 1}"
        memory = (
            f"{before} had already updated the weights, so the model in memory may hold non-finite values"
        )
    if bad_data is not None:
        data = f": step {last}'s {bad_data}"
        fix = "Clean the data before training (drop those samples, or fill them: torch.nan_to_num(x))."
    else:
        data = ""
        hints = [f"a lower lr (now {lr:g})"]
        if not clip_norm:
            hints.append("clipping (clip_norm)")
        if precision != "fp32":
            hints.append("precision='fp32'")
        fix = "Try " + " or ".join(hints) + "."
    return (
        f"training loss became {value} {where}, epoch {epoch}{data}; training stopped before the optimizer "
        f"step of step {last}; {memory}; {kept}. {fix}"
    )


def non_finite_data(batches: Iterable[Any]) -> str | None:
    """Where `batches` (a step's micro-batches) first hold NaN or inf, or None when they are finite.

    Example:
        >>> x = torch.tensor([[1.0, float("nan")], [2.0, 3.0]])
        >>> non_finite_data([(x, torch.tensor([0, 1]))])
        'batch[0] ((2, 2) float32) holds nan in 1 of 4 values'
    """
    for batch in batches:
        for where, tensor in named_tensors(batch):
            if not tensor.is_floating_point():
                continue
            try:  # on the error path only: a tensor torch cannot test (nested, sparse) is passed over
                count = int((~torch.isfinite(tensor)).sum())
            except (RuntimeError, NotImplementedError):
                continue
            if count:
                tests = (("nan", torch.isnan), ("inf", torch.isinf))
                kinds = " and ".join(kind for kind, test in tests if bool(test(tensor).any()))
                return (
                    f"{where} ({describe_batch(tensor)}) holds {kinds} in {count} of {tensor.numel()} values"
                )
    return None


def check_finite(
    strategy: Strategy,
    window: LogWindow,
    pending: torch.Tensor | None,
    batches: Iterable[Any] = (),
    precision: str = "fp32",
    control: Any = None,
    *,
    step: int,
    epoch: int,
    checkpoint: Path | None,
    settings: Settings,
) -> float | None:
    """The loss sum of `window`'s steps since the last check, plus `pending` (the running step's), averaged
    over ranks in one sync; None when there is nothing to check. Raises `NonFiniteLossError` when it is NaN
    or infinite, saying where (`step`: steps done before `pending`), what was kept and what to try: the data
    when `batches` (the running step's) hold NaN or inf. Where a rank's `control` was asked to stop
    (`ask_stop`), every rank's stops in the same sync."""
    total = window.loss_sum_with(pending)
    if total is None:
        return None
    asked = control is not None and control.stop_asked
    value, agreed = loss_sum_over_ranks(strategy, total, asked)
    if agreed and control is not None:
        control.stop_as_agreed()  # every rank, at this same step: they stop together at the next boundary
    if not math.isfinite(value):
        first, last = step - window.steps + 1, step + (1 if pending is not None else 0)
        state = dict(epoch=epoch, checkpoint=checkpoint, lr=settings.lr, clip_norm=settings.clip_norm)
        bad_data = non_finite_data(batches)
        raise NonFiniteLossError(
            non_finite_message(value, first, last, precision=precision, bad_data=bad_data, **state)
        )
    return value
