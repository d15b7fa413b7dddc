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
    Supervision(callbacks=(), control=None)
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

from workbench.train.control import TrainControl
from workbench.train.events import Callback


@dataclass(frozen=True)
class Supervision:
    """`callbacks` subscribe to every trainer's events (before the trainer's own); `control`, when given,
    is the trainer's control (its requests come from the supervisor)."""

    callbacks: tuple[Callback, ...] = ()
    control: TrainControl | None = None


_UNSUPERVISED = Supervision()
_CURRENT: contextvars.ContextVar[Supervision] = contextvars.ContextVar(
    "workbench_supervision", default=_UNSUPERVISED
)


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
