"""What the training loop tells its subscribers: plain dicts through no-op hooks.

The loop imports no UI code; widgets, loggers and progress bars subscribe by passing a `Callback`.
Every event is a plain ``dict`` so it can cross a process boundary (queue, pipe, JSON) unchanged; its keys
are typed in one schema module, `workbench.train.event_schema`: ``on_fit_start`` gets a `FitStartEvent`,
``on_step`` a `StepEvent` (a logged optimizer step, with ``memory``, ``step_time``, ``timeline``,
``profile``, ``compile`` or ``rank_loss`` on some), ``on_eval`` an `EvalEvent` (one split evaluated after an
epoch, its metrics by name), ``on_fit_end`` a `FitEndEvent` (status, error, checkpoint, the last metrics
per split). ``Event`` is what a hook that takes any of them is annotated with.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workbench.train.event_schema import EvalEvent, FitEndEvent, FitStartEvent, StepEvent

Event = dict[str, Any]


class Callback:
    """Receives training events; override only the hooks you need (the defaults do nothing).

    A callback that shows a person the fit's progress (a `Dashboard`, a progress bar) sets `shows_progress`:
    a `Trainer` with ``progress=None`` then shows no bar of its own.

    Example:
        >>> import torch, torch.nn.functional as F
        >>> from torch.utils.data import TensorDataset
        >>> from workbench.train import TrainConfig, Trainer
        >>> class Losses(Callback):
        ...     def __init__(self):
        ...         self.losses = []
        ...     def on_step(self, metrics):
        ...         self.losses.append(metrics["loss"])
        ...     def on_fit_end(self, summary):
        ...         print(summary["status"], "after", len(self.losses), "logged steps")
        >>> data = TensorDataset(torch.randn(64, 3), torch.arange(64) % 2)
        >>> config = TrainConfig(epochs=2, batch_size=16, log_every=1)
        >>> _ = Trainer(torch.nn.Linear(3, 2), F.cross_entropy, data, config, callbacks=[Losses()]).fit()
        finished after 8 logged steps
    """

    shows_progress: bool = False

    def on_fit_start(self, info: FitStartEvent) -> None:
        """Training is about to run its first (or first resumed) step."""

    def on_step(self, metrics: StepEvent) -> None:
        """A logged optimizer step finished."""

    def on_eval(self, metrics: EvalEvent) -> None:
        """An evaluation of one split finished."""

    def on_fit_end(self, summary: FitEndEvent) -> None:
        """Training ended: finished, stopped on request, or failed (``summary["error"]`` says why)."""


class CallbackList(Callback):
    """Forwards every event to each callback in `callbacks`, in order (the trainer's subscribers).

    A callback needs only the hooks it uses: any object with, say, just ``on_step`` is called for steps
    and skipped for the other events.

    Example:
        >>> class Steps:
        ...     def on_step(self, metrics):
        ...         print("step", metrics["step"])
        >>> events = CallbackList([Steps()])
        >>> events.on_fit_start({}); events.on_step({"step": 1}); events.on_fit_end({})
        step 1
    """

    def __init__(self, callbacks: Iterable[Callback] = ()) -> None:
        self.callbacks = list(callbacks)

    @property
    def shows_progress(self) -> bool:  # type: ignore[override]
        """True when one of the callbacks shows the fit's progress."""
        return any(getattr(callback, "shows_progress", False) for callback in self.callbacks)

    def on_fit_start(self, info: Event) -> None:
        self._send("on_fit_start", info)

    def on_step(self, metrics: Event) -> None:
        self._send("on_step", metrics)

    def on_eval(self, metrics: Event) -> None:
        self._send("on_eval", metrics)

    def on_fit_end(self, summary: Event) -> None:
        self._send("on_fit_end", summary)

    def _send(self, hook: str, event: Event) -> None:
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if method is not None:
                method(event)


def evaluation_metrics(event: Event) -> dict[str, float]:
    """The metric values of an evaluation event (loss first), without its step, epoch, rank, time.

    Example:
        >>> evaluation_metrics({"step": 3, "epoch": 0, "split": "val", "f1": 0.5, "loss": 0.2, "rank": 0})
        {'loss': 0.2, 'f1': 0.5}
    """
    skip = {"step", "epoch", "rank", "time", "split", "event"}
    values = {k: v for k, v in event.items() if k not in skip and isinstance(v, int | float)}
    return {k: values[k] for k in sorted(values, key=lambda k: (k != "loss", k != "accuracy"))}
