"""The schema of the events the training loop emits: one TypedDict per hook, and the functions that build
them. An event is still a plain ``dict`` (it crosses pipes and goes into JSON lines unchanged), so a
subscriber reads ``event["loss"]``, and a type checker knows which keys each hook's event has.

- `FitStartEvent` (``on_fit_start``), `StepEvent` (``on_step``: a logged optimizer step), `EvalEvent`
  (``on_eval``: one split evaluated), `FitEndEvent` (``on_fit_end``). Every one but the first carries
  ``step`` (optimizer steps done, 1-based), ``epoch`` (0-based), ``rank`` and ``time`` (unix seconds).
- What some step events carry besides (``memory``, ``step_time``, ``timeline``, ``profile``, ``compile``,
  ``rank_loss``) is described on `StepEvent`.

    >>> event = step_event(7, 0, 0, loss=0.5, lr=0.01, grad_norm=None, samples_per_s=900.0)
    >>> event["step"], event["loss"], sorted(event)[:3]
    (7, 0.5, ['epoch', 'grad_norm', 'loss'])
"""

from __future__ import annotations

import time
from typing import Any, TypedDict

from workbench.train.trained_what import ModelSummary


class FitStartEvent(TypedDict, total=False):
    """``on_fit_start``: the fit about to run its first (or first resumed) step. ``resume_changes`` only
    when a resume changed optimizer settings; ``launch`` only from a `Launch` (what runs where)."""

    run: str | None
    rank: int
    world_size: int
    strategy: str  # the strategy's one-line description
    global_batch: int  # samples per optimizer step over all ranks: batch_size × data shards × accumulate
    epochs: int | None  # the epochs the fit begins (None: max_steps on data of unknown length)
    steps_per_epoch: int | None  # None: a training split without a length
    total_steps: int | None
    start_step: int  # > 0 when resuming
    config: dict[str, Any]  # the TrainConfig as a dict
    model: ModelSummary  # the model as given (`workbench.train.trained_what`)
    samples: dict[str, int | None]  # split → its samples (None: a stream without a length)
    time: float
    resume_changes: str
    launch: str


class _Stamped(TypedDict):
    step: int
    epoch: int
    rank: int
    time: float


class _StepFields(_Stamped):
    loss: float  # the mean over the logged interval (over all ranks when there are several)
    lr: float  # the lr of the step (the base lr times the schedule's factor)
    grad_norm: float | None  # before clipping
    samples_per_s: float | None  # None on ranks whose data another rank already counts


class StepEvent(_StepFields, total=False):
    """``on_step``: a logged optimizer step finished. Some steps carry more, from the rank that measured:

    - ``memory`` (once a fit, every rank): bytes this rank held in that step, ``{"params", "grads",
      "optimizer_state", "activations", "cuda_peak", "device"}`` (`workbench.train.memory`).
    - ``step_time`` (every logged step, unless ``time_breakdown=False``): seconds per phase, ``{"data",
      "copy", "forward", "backward", "comm", "optimizer", "other", "total", "comm_overlapped"}`` and a
      ``note`` where a strategy cannot separate a phase (`workbench.train.step_time`).
    - ``timeline`` (pipeline parallel): ``{"stage", "stages", "microbatches", "schedule", "spans"}``, spans
      ``[kind, microbatch, start, end]`` with kind ``"F"`` or ``"B"``.
    - ``profile`` (once, when a profiled range is written): the top operators (`workbench.train.profiling`).
    - ``compile`` (``compile`` not "off"): compile seconds, graphs and breaks so far.
    - ``rank_loss`` (several ranks): this rank's own loss, where it is its own data's.
    """

    memory: dict[str, Any]
    step_time: dict[str, Any]
    timeline: dict[str, Any]
    profile: dict[str, Any]
    compile: dict[str, Any]
    rank_loss: float


class EvalEvent(_Stamped):
    """``on_eval``: one split evaluated after an epoch (``epoch``: the one just finished). Besides these, the
    metrics by name: ``accuracy`` for classification, and each of the trainer's ``metrics``."""

    split: str  # "val" or "test"
    loss: float


class _FitEndFields(_Stamped):
    status: str  # "finished", "stopped" or "failed"
    error: str | None  # "Type: message" of a failure
    checkpoint: str | None


class FitEndEvent(_FitEndFields, total=False):
    """``on_fit_end``: the fit ended. The last metrics per split under ``"train"``, ``"val"``, ``"test"``
    when known; ``compile`` totals when compiling."""

    train: dict[str, float]
    val: dict[str, float]
    test: dict[str, float]
    compile: dict[str, Any]


def step_event(step: int, epoch: int, rank: int, **fields: Any) -> StepEvent:
    """A `StepEvent` of `fields` (``loss``, ``lr``, ``grad_norm``, ``samples_per_s`` and any extras)."""
    return _stamped(step, epoch, rank, fields)


def eval_event(step: int, epoch: int, rank: int, split: str, metrics: dict[str, float]) -> EvalEvent:
    """An `EvalEvent`: `metrics` of `split` (``loss`` and the others by name)."""
    return _stamped(step, epoch, rank, {"split": split, **metrics})


def fit_end_event(
    step: int,
    epoch: int,
    rank: int,
    *,
    status: str,
    error: BaseException | None,
    checkpoint: object | None,
    **extras: Any,
) -> FitEndEvent:
    """A `FitEndEvent`; `extras`: the last metrics per split, the compile totals."""
    fields = {
        "status": status,
        "error": None if error is None else f"{type(error).__name__}: {error}",
        "checkpoint": None if checkpoint is None else str(checkpoint),
        **extras,
    }
    return _stamped(step, epoch, rank, fields)


def _stamped(step: int, epoch: int, rank: int, fields: dict[str, Any]) -> Any:
    """`fields` between the step and epoch they belong to and the rank and time they come from."""
    return {"step": step, "epoch": epoch, **fields, "rank": rank, "time": time.time()}
