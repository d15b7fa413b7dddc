"""Thread-safe requests from a UI to a running loop: pause, resume, stop, new lr or clipping, a profile.

The UI thread calls `pause`, `resume`, `stop`, `set_lr`, `set_clipping`, `profile`; the training loop calls
`checkpoint` between optimizer steps, so every request takes effect at a step boundary.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass

from workbench._validate import check_int
from workbench.train.config import check_lr


@dataclass(frozen=True)
class Changes:
    """Settings to apply before the next step; None means unchanged."""

    lr: float | None = None
    clip_norm: float | None = None
    clip_value: float | None = None
    profile_steps: int | None = None  # profile this many steps from the next one on

    def any(self) -> bool:
        """True if at least one setting changes."""
        return any(value is not None for value in dataclasses.astuple(self))


class TrainControl:
    """Requests to a running loop, applied at the next step boundary.

    Example:
        >>> control = TrainControl()
        >>> control.set_lr(0.01)
        >>> control.stop()
        >>> control.at_step_boundary()
        Changes(lr=0.01, clip_norm=None, clip_value=None, profile_steps=None)
        >>> control.stop_requested
        True
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._paused = False
        self._stop = False
        self._pending = Changes()

    @property
    def paused(self) -> bool:
        """True while a pause is requested."""
        return self._paused

    @property
    def stop_requested(self) -> bool:
        """True once `stop` was called."""
        return self._stop

    def pause(self) -> None:
        """Hold the loop at the next step boundary until `resume` or `stop`."""
        with self._condition:
            self._paused = True

    def resume(self) -> None:
        """Let a paused loop go on."""
        with self._condition:
            self._paused = False
            self._condition.notify_all()

    def stop(self) -> None:
        """Finish the current step, save a checkpoint, end training (also ends a pause)."""
        with self._condition:
            self._stop = True
            self._condition.notify_all()

    def reset(self) -> None:
        """Forget stop, pause and pending changes (before starting a new `fit`)."""
        with self._condition:
            self._paused = self._stop = False
            self._pending = Changes()
            self._condition.notify_all()

    def set_lr(self, lr: float) -> None:
        """Use learning rate `lr` (> 0, ≤ 1000 as in the config) from the next step on; the schedule
        continues from there."""
        check_lr(lr)
        with self._condition:
            self._pending = dataclasses.replace(self._pending, lr=float(lr))

    def set_clipping(self, *, norm: float | None = None, value: float | None = None) -> None:
        """Clip gradients by global `norm` and/or by `value` from the next step on; 0 turns one off."""
        if norm is None and value is None:
            raise ValueError("set_clipping needs norm= or value= (0 turns clipping off)")
        for field, number in (("norm", norm), ("value", value)):
            if number is not None and (not _is_number(number) or number < 0):
                raise ValueError(f"{field} must be a finite number ≥ 0 (0 = off), got {number!r}")
        with self._condition:
            self._pending = dataclasses.replace(
                self._pending,
                clip_norm=self._pending.clip_norm if norm is None else float(norm),
                clip_value=self._pending.clip_value if value is None else float(value),
            )

    def profile(self, steps: int = 5) -> None:
        """Record a torch.profiler trace of the next `steps` optimizer steps on every rank (as
        ``TrainConfig(profile_steps=...)`` does for chosen ones); ignored while a profile is under way."""
        check_int("steps", steps, minimum=1)
        with self._condition:
            self._pending = dataclasses.replace(self._pending, profile_steps=steps)

    def at_step_boundary(self, wait: float | None = None) -> Changes:
        """Called by the loop between steps: block while paused, then return and clear pending changes.

        `wait` bounds the time spent paused (seconds, None = until resumed or stopped); tests use it.
        """
        with self._condition:
            if self._paused and not self._stop:
                self._condition.wait_for(lambda: not self._paused or self._stop, timeout=wait)
            changes, self._pending = self._pending, Changes()
            return changes


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
