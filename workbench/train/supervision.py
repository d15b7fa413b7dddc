"""What a supervising process hands every `Trainer` built under it: its event stream and its control.

A launcher's worker runs the user's function, which builds its own `Trainer`; the launcher still needs that
trainer's events (for the dashboard in the notebook) and must reach it with pause/stop/lr requests. The
worker says so explicitly, for the duration of the function only::

    with supervised(Supervision(callbacks=[pipe_events], control=control)):
        fn(strategy)          # every Trainer built in here subscribes `pipe_events` and obeys `control`

Outside such a block `current_supervision()` is empty and a `Trainer` uses what it is given. The value
lives in a `contextvars.ContextVar`, so it is scoped to the block (and to the thread that entered it).

Example:
    >>> from workbench.train.control import TrainControl
    >>> control = TrainControl()
    >>> with supervised(Supervision(control=control)):
    ...     current_supervision().control is control
    True
    >>> current_supervision()
    Supervision(callbacks=(), control=None, config=None)
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from workbench.train.config import TrainConfig
from workbench.train.control import TrainControl
from workbench.train.events import Callback


@dataclass(frozen=True)
class Supervision:
    """`callbacks` subscribe to every trainer's events (before the trainer's own); `control`, when given,
    is the trainer's control (its requests come from the supervisor)."""

    callbacks: tuple[Callback, ...] = ()
    control: TrainControl | None = None
    config: TrainConfig | None = None  # the launcher's: a trainer's config, the same on every rank


_UNSUPERVISED = Supervision()
_CURRENT: contextvars.ContextVar[Supervision] = contextvars.ContextVar(
    "workbench_supervision", default=_UNSUPERVISED
)


def is_supervised() -> bool:
    """True inside a `supervised` block: a launcher's worker, whose events its supervisor shows."""
    return _CURRENT.get() is not _UNSUPERVISED


def current_supervision() -> Supervision:
    """The supervision of the innermost `supervised` block around this call (empty outside any)."""
    return _CURRENT.get()


@contextlib.contextmanager
def supervised(supervision: Supervision) -> Iterator[Supervision]:
    """Within the block, trainers built on this thread take `supervision`'s callbacks and control."""
    token = _CURRENT.set(supervision)
    try:
        yield supervision
    finally:
        _CURRENT.reset(token)


def supervised_control_and_callbacks(
    control: TrainControl | None, callbacks: Iterable[Callback]
) -> tuple[TrainControl, list[Callback]]:
    """A trainer's control and callbacks under the current supervision: a launcher's control when the
    trainer was given none (else a fresh one), and its event stream ahead of the trainer's callbacks."""
    supervision = current_supervision()
    if control is None:
        control = supervision.control if supervision.control is not None else TrainControl()
    return control, [*supervision.callbacks, *callbacks]


def supervised_config(config: TrainConfig | None) -> TrainConfig:
    """A trainer's config under the current supervision: the launcher's when it has one (`Launch(config=)`)
    and the trainer was given none, or the trainer's own when both are the same; without a launcher's,
    the trainer's (default `TrainConfig()`). A trainer given another config than its launcher's is refused,
    naming the settings that differ, so a dashboard never shows one config while the workers train with
    another."""
    launched = current_supervision().config
    if launched is None or config is None:
        return config if config is not None else launched if launched is not None else TrainConfig()
    if config != launched:
        ours, theirs = config.to_dict(), launched.to_dict()
        differ = [f"{k}: {ours[k]!r} here, {theirs[k]!r} in Launch" for k in ours if ours[k] != theirs.get(k)]
        raise ValueError(
            "this Trainer's config is not the one given to Launch(config=...), which the dashboard shows "
            f"({'; '.join(differ[:4])}); pass the same config to both, or none to the Trainer to use Launch's"
        )
    return config
