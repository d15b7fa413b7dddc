"""Where a training step's time goes: seconds per phase of one logged step, as the ``step_time`` event.

The loop times its logged steps only (every ``log_every``-th), with wall clocks at the phase boundaries;
on a GPU each boundary first waits for the device (``torch.cuda.synchronize``), so a phase holds the work
it queued. The phases, in step order:

- ``data``: waiting for the loader to give the batch;
- ``copy``: moving the batch to the device;
- ``forward``, ``backward``: the model's passes (a pipeline stage: its passes' spans);
- ``comm``: communication the step waited for (DDP: the part of the gradient all-reduce that did not
  overlap backward; a pipeline stage: its time outside its own passes; FSDP on CPU: its all-gathers and
  reduce-scatters, each a synchronous call); what overlapped is reported apart,
  as ``comm_overlapped``, and is not in the sum; with several ranks, also the logged loss summed over
  them (the NaN check), where a rank waits for the slowest;
- ``optimizer``: clipping and the optimizer step;
- ``other``: the rest (the one-off memory probe, a single process's NaN check, zeroing gradients).
  Control requests and pauses between steps are outside the step, as they are outside ``samples_per_s``.

With ``TrainConfig(compile=...)``, the seconds a step spent compiling (its first steps, and any recompile)
are taken out of the phase they fell in and reported apart as ``compiling``, not in the sum.

The parts add up to ``total``, the step's wall time (less any ``compiling``). A strategy that cannot
separate a phase leaves it in another and says so in ``note`` (tensor parallel's collectives, and FSDP's on
GPUs, run inside forward and backward).

Example:
    >>> import time
    >>> clock = StepClock(torch.device("cpu"), started=time.perf_counter())
    >>> clock.mark("data"); clock.mark("forward"); clock.mark("backward")
    >>> clock.add("data", 0.002)  # the loader's wait, measured before the clock started
    >>> clock.move("backward", "comm", 1.0)  # at most what backward holds moves
    >>> report = clock.report()
    >>> sorted(report)[:4], report["total"] == sum(report[phase] for phase in PHASES)
    (['backward', 'comm', 'comm_overlapped', 'copy'], True)
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import torch

PHASES = ("data", "copy", "forward", "backward", "comm", "optimizer", "other")


class StepClock:
    """Accumulates the wall time between successive `mark` calls into the phase each mark names.

    Args:
        device: the step's device; on CUDA each mark waits for it first.
        started: ``time.perf_counter()`` when the step began (before the loader was asked for its batch).
    """

    enabled = True

    def __init__(self, device: torch.device, started: float) -> None:
        self._cuda = device if device.type == "cuda" else None
        self._last = started
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.comm_overlapped = 0.0
        self.compiling = 0.0
        self.note: str | None = None

    def mark(self, phase: str) -> None:
        """The time since the previous mark (or the start) was spent on `phase`."""
        if self._cuda is not None:
            torch.cuda.synchronize(self._cuda)
        now = time.perf_counter()
        self.seconds[phase] += now - self._last
        self._last = now

    def move(self, source: str, target: str, seconds: float) -> None:
        """Count up to `seconds` of `source`'s time as `target`'s (never more than `source` holds)."""
        moved = min(max(seconds, 0.0), self.seconds[source])
        self.seconds[source] -= moved
        self.seconds[target] += moved

    def add(self, phase: str, seconds: float) -> None:
        """Count `seconds` measured elsewhere (the loader's wait, before the clock started) as `phase`'s."""
        self.seconds[phase] += seconds

    def overlapped(self, seconds: float) -> None:
        """Communication that ran while the step computed: reported, not in the sum."""
        self.comm_overlapped += seconds

    def set_aside(self, phase: str, seconds: float) -> None:
        """Up to `seconds` of `phase` were compiling (torch.compile): out of the phase and the sum,
        reported as ``compiling``."""
        moved = min(max(seconds, 0.0), self.seconds[phase])
        self.seconds[phase] -= moved
        self.compiling += moved

    def explain(self, note: str) -> None:
        """Say which phase holds time the strategy cannot separate (e.g. FSDP's communication)."""
        self.note = note

    def report(self) -> dict[str, Any]:
        """The ``step_time`` event field: seconds per phase, their ``total``, ``comm_overlapped``, any
        ``note``."""
        report: dict[str, Any] = dict(self.seconds)
        report["total"] = sum(self.seconds.values())
        report["comm_overlapped"] = self.comm_overlapped
        if self.compiling:
            report["compiling"] = self.compiling
        if self.note:
            report["note"] = self.note
        return report


class NoClock:
    """The clock of an untimed step: every call does nothing."""

    enabled = False

    def mark(self, phase: str) -> None:
        pass

    def move(self, source: str, target: str, seconds: float) -> None:
        pass

    def add(self, phase: str, seconds: float) -> None:
        pass

    def overlapped(self, seconds: float) -> None:
        pass

    def set_aside(self, phase: str, seconds: float) -> None:
        pass

    def explain(self, note: str) -> None:
        pass


NO_CLOCK = NoClock()  # stateless: one instance serves every untimed step
Clock = StepClock | NoClock  # what the loop hands a strategy for one step


def takes_clock(forward_backward: Callable[..., Any]) -> bool:
    """Whether a strategy's ``forward_backward`` accepts the clock (one written before it existed does not).

    Example:
        >>> takes_clock(lambda model, group, objective, precision, scaler, clock=NO_CLOCK: None)
        True
        >>> takes_clock(lambda model, group, objective, precision, scaler: None)
        False
    """
    parameters = inspect.signature(forward_backward).parameters.values()
    return any(p.name == "clock" or p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)


def clocked_forward_backward(strategy: Any) -> Callable[..., Any]:
    """`strategy.forward_backward`, called with the clock last; one written before the clock existed is
    called without it, and its copy, forward, backward and communication are all counted as forward (the
    step's report says so)."""
    forward_backward = strategy.forward_backward
    if takes_clock(forward_backward):
        return forward_backward

    def counted_as_forward(*parts: Any) -> Any:
        *arguments, clock = parts
        loss = forward_backward(*arguments)
        clock.mark("forward")
        clock.explain(
            f"{type(strategy).__name__}.forward_backward takes no clock argument: its copy, forward, "
            "backward and communication are all counted as forward"
        )
        return loss

    return counted_as_forward
