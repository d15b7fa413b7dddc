"""The NaN/inf guard: one sync per logged step checks every loss since the last one, on every rank."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from workbench.train.control import Settings
from workbench.train.log_window import LogWindow
from workbench.train.strategy import Strategy


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; training stopped before the optimizer step."""


def loss_sum_over_ranks(strategy: Strategy, total: torch.Tensor) -> float:
    """`total` (this rank's loss sum) averaged over the shards of the data, as a float on every rank.

    Ranks that share a shard with a reporting rank add 0. NaN and inf survive the sum, so every rank sees
    a NaN on any rank and all stop at the same step.
    """
    if strategy.world_size > 1:
        total = total.detach().float().clone() if strategy.reports_loss else torch.zeros_like(total).float()
        total = strategy.all_reduce(total, "sum") / strategy.data_world_size
    return float(total)


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
) -> str:
    """What `NonFiniteLossError` says: where the loss went bad, what was kept, what to try.

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
    hints = [f"a lower lr (now {lr:g})"]
    if not clip_norm:
        hints.append("clipping (clip_norm)")
    if precision != "fp32":
        hints.append("precision='fp32'")
    if first == last:
        memory = f"the model in memory holds the weights after step {last - 1}"
    else:  # the steps before the check already updated the weights, possibly from a non-finite loss
        memory = (
            f"steps {first}-{last - 1} had already updated the weights, so the model in memory may hold "
            "non-finite values"
        )
    return (
        f"training loss became {value} {where}, epoch {epoch}; training stopped before the optimizer "
        f"step of step {last}; {memory}; {kept}. Try " + " or ".join(hints) + "."
    )


def check_finite(
    strategy: Strategy,
    window: LogWindow,
    pending: torch.Tensor | None,
    *,
    step: int,
    epoch: int,
    checkpoint: Path | None,
    settings: Settings,
    precision: str,
) -> float | None:
    """The loss sum of `window`'s steps since the last check, plus `pending` (the running step's), averaged
    over ranks in one sync; None when there is nothing to check. Raises `NonFiniteLossError` when it is NaN
    or infinite, saying where (`step`: steps done before `pending`), what was kept and what to try."""
    total = window.loss_sum_with(pending)
    if total is None:
        return None
    value = loss_sum_over_ranks(strategy, total)
    if not math.isfinite(value):
        first, last = step - window.steps + 1, step + (1 if pending is not None else 0)
        state = dict(epoch=epoch, checkpoint=checkpoint, lr=settings.lr, clip_norm=settings.clip_norm)
        raise NonFiniteLossError(non_finite_message(value, first, last, precision=precision, **state))
    return value
