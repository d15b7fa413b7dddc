"""What the training loop tells its subscribers: plain dicts through no-op hooks.

The loop imports no UI code; widgets, loggers and progress bars subscribe by passing a `Callback`.
Every event is a plain ``dict`` so it can cross a process boundary (queue, pipe, JSON) unchanged.

Events and their keys:

- ``on_fit_start(info)``: ``run``, ``rank``, ``epochs``, ``steps_per_epoch``, ``total_steps``,
  ``start_step`` (> 0 when resuming), ``config`` (the config as a dict).
- ``on_step(metrics)``: ``step`` (1-based optimizer step), ``epoch`` (0-based), ``loss`` (mean over the
  logged interval), ``lr``, ``samples_per_s``, ``grad_norm`` (before clipping), ``rank``, ``time`` (unix s).
  Some steps carry more, always from the rank that measured it (``rank``):

  - ``memory`` (once a fit, every rank: the first logged step from the fit's second step on, or its
    only step): bytes this rank held in that step,
    ``{"params", "grads", "optimizer_state", "activations", "cuda_peak", "device"}``:
    parameters, gradients and optimizer state as stored on this rank (its shards under FSDP or tensor
    parallel, its stage under pipeline parallel); ``activations`` is the peak of the tensors autograd
    saved for backward during that step (the measured proxy on CPU); ``cuda_peak`` is
    ``torch.cuda.max_memory_allocated`` over the step on a GPU, else None; ``device`` e.g. ``"cpu"``.
  - ``timeline`` (pipeline parallel, every stage, every logged step but those where torch's engine first
    meets a batch size and infers shapes): ``{"stage", "stages", "microbatches", "schedule", "spans"}``
    where ``spans`` lists ``[kind, microbatch, start, end]`` for this stage in this step: kind ``"F"``
    (forward) or ``"B"`` (backward), times in unix seconds. ``microbatches`` counts one batch's; with
    gradient accumulation a step runs several batches and their micro-batches are numbered on.
  - ``step_time`` (every logged step, every rank, unless ``TrainConfig(time_breakdown=False)``): seconds
    of the step per phase, ``{"data", "copy", "forward", "backward", "comm", "optimizer", "other",
    "total", "comm_overlapped"}`` and, where a strategy cannot separate a phase, ``note``
    (see `workbench.train.step_time`).
  - ``rank_loss`` (several ranks): this rank's own loss, on ranks whose loss is their own data's (every
    rank of DDP/FSDP; the last stage of a pipeline; rank 0 of tensor parallel).
- ``on_eval(metrics)``: ``step``, ``epoch`` (the one just finished), ``split`` ("val" or "test"),
  ``loss``, ``accuracy`` (classification only, else absent), ``rank``, ``time``.
- ``on_fit_end(summary)``: ``status`` ("finished", "stopped" or "failed"), ``step``, ``epoch``, ``error``
  (message or None), ``checkpoint`` (path or None), ``rank``, ``time``, and the last metrics per split
  under ``"val"`` / ``"test"`` / ``"train"`` when known.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Event = dict[str, Any]


class Callback:
    """Receives training events; override only the hooks you need (the defaults do nothing)."""

    def on_fit_start(self, info: Event) -> None:
        """Training is about to run its first (or first resumed) step."""

    def on_step(self, metrics: Event) -> None:
        """A logged optimizer step finished."""

    def on_eval(self, metrics: Event) -> None:
        """An evaluation of one split finished."""

    def on_fit_end(self, summary: Event) -> None:
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
