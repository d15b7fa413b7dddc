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
from workbench.train.config import TrainConfig, check_lr


@dataclass(frozen=True)
class Changes:
    """Settings to apply before the next step; None means unchanged.

    Example (what a loop of your own reads from a `TrainControl` a Dashboard drives, once per step):
        >>> control = TrainControl()
        >>> control.set_lr(0.01)  # the Dashboard's Apply
        >>> control.at_step_boundary()
        Changes(lr=0.01, clip_norm=None, clip_value=None, profile_steps=None)
        >>> control.at_step_boundary().any()  # taken once
        False
    """

    lr: float | None = None
    clip_norm: float | None = None
    clip_value: float | None = None
    profile_steps: int | None = None  # profile this many steps from the next one on

    def any(self) -> bool:
        """True if at least one setting changes."""
        return any(value is not None for value in dataclasses.astuple(self))


@dataclass
class Settings:
    """The settings a fit may change while it runs (a dashboard's Apply, a resume's new config): the base lr
    and the clipping. The one place the current lr lives: each step gives the optimizer's param groups this
    lr times the schedule's factor; ``config.optimizer.lr`` is only where a fresh run starts.

    Example:
        >>> settings = Settings.of(TrainConfig())
        >>> settings.apply(Changes(lr=0.5)), settings.lr
        (True, 0.5)
        >>> settings.in_config(TrainConfig()).optimizer.lr
        0.5
    """

    lr: float
    clip_norm: float
    clip_value: float

    @classmethod
    def of(cls, config: TrainConfig) -> Settings:
        """The settings `config` starts with."""
        return cls(config.optimizer.lr, config.clip_norm, config.clip_value)

    def apply(self, changes: Changes) -> bool:
        """Take the lr and clipping `changes` sets; True when one of them was set."""
        for name in ("lr", "clip_norm", "clip_value"):
            if getattr(changes, name) is not None:
                setattr(self, name, getattr(changes, name))
        return (changes.lr, changes.clip_norm, changes.clip_value) != (None, None, None)

    def in_config(self, config: TrainConfig) -> TrainConfig:
        """`config` as training runs now: with these settings in force."""
        optimizer = dataclasses.replace(config.optimizer, lr=self.lr)
        return dataclasses.replace(
            config, optimizer=optimizer, clip_norm=self.clip_norm, clip_value=self.clip_value
        )


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
        self._asked = False  # a stop asked of this rank alone, which the ranks agree on (`ask_stop`)
        self._agreed = False  # the ranks agreed on one rank's asked stop (`stop_as_agreed`)
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

    def ask_stop(self) -> None:
        """Stop, once the ranks agree: at the next logged step every rank learns that one asked (in the loss
        check's sum over ranks) and stops after it. For a rank whose launcher signals each rank itself
        (SIGTERM from torchrun, srun or mpirun), not through rank 0's control. Safe in a signal handler."""
        self._asked = True

    @property
    def stop_asked(self) -> bool:
        """True once `ask_stop` was called."""
        return self._asked

    def stop_as_agreed(self) -> None:
        """`stop`, on every rank at one step, because a rank asked (`ask_stop`); `stop_agreed` says so."""
        self._agreed = True
        self.stop()

    @property
    def stop_agreed(self) -> bool:
        """True once `stop_as_agreed` was called: the stop was a rank's ask, not a call of `stop`."""
        return self._agreed

    def reset(self) -> None:
        """Forget stop, pause and pending changes (before starting a new `fit`)."""
        with self._condition:
            self._paused = self._stop = self._asked = self._agreed = False
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
            return self.take_changes()  # the condition's lock is re-entrant

    def take_changes(self) -> Changes:
        """Return and clear the pending changes without waiting (a launcher forwarding them)."""
        with self._condition:
            changes, self._pending = self._pending, Changes()
            return changes


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class ControlMessage:
    """Requests on their way from a controller to a loop in another process, or from rank 0 to the other
    ranks: stop, pause (True) or resume (False; None: unchanged), and the `Changes`. One encoding for the
    launcher's pipe to rank 0 and the broadcast across ranks: `encode` and `decode`.

    Example:
        >>> message = ControlMessage(stop=False, paused=True, changes=Changes(lr=0.01))
        >>> ControlMessage.decode(message.encode()) == message
        True
    """

    stop: bool = False
    paused: bool | None = None
    changes: Changes = Changes()

    @classmethod
    def take(cls, control: TrainControl, paused: bool) -> ControlMessage:
        """What `control` asks for now, without waiting: a stop alone, else the pause state when it differs
        from `paused` (the last one sent) and the changes pending (taken: sent once)."""
        if control.stop_requested:
            return cls(stop=True)
        return cls(
            paused=control.paused if control.paused != paused else None, changes=control.take_changes()
        )

    def empty(self) -> bool:
        """Nothing to send."""
        return not self.stop and self.paused is None and not self.changes.any()

    def encode(self) -> list[float]:
        """The message as floats (NaN: unset), the same on a pipe and in a broadcast tensor."""
        c = self.changes
        values = [float(self.stop), self.paused, c.lr, c.clip_norm, c.clip_value, c.profile_steps]
        return [math.nan if value is None else float(value) for value in values]

    @classmethod
    def decode(cls, values: list[float]) -> ControlMessage:
        """The message `encode` made."""
        stop, paused, lr, clip_norm, clip_value, profile = (None if math.isnan(v) else v for v in values)
        changes = Changes(lr, clip_norm, clip_value, None if profile is None else int(profile))
        return cls(stop=bool(stop), paused=None if paused is None else bool(paused), changes=changes)

    def apply_to(self, control: TrainControl) -> None:
        """Make `control` (the receiving loop's) ask for the same."""
        if self.paused is not None:
            control.pause() if self.paused else control.resume()
        if self.stop:
            control.stop()
        c = self.changes
        if c.lr is not None:
            control.set_lr(c.lr)
        if c.clip_norm is not None or c.clip_value is not None:
            control.set_clipping(norm=c.clip_norm, value=c.clip_value)
        if c.profile_steps is not None:
            control.profile(c.profile_steps)
