"""What an interrupt (the notebook's stop button, Ctrl-C, SIGTERM) does to training: stop, save, one line.

While a fit runs in the main thread, `stop_on_interrupt` turns the first SIGINT or SIGTERM (how Slurm's time
limit and `scancel`, Kubernetes, `docker stop` and systemd ask a process to end, before a SIGKILL some
seconds later) into a stop request at the next step boundary (as the Dashboard's Stop: the run saves its
checkpoint and logs ``stopped``); a second quits at once. What then reaches the cell is
`TrainingInterrupted`, a KeyboardInterrupt whose notebook rendering is its one line (IPython shows
``_render_traceback_`` instead of a traceback): what stopped, at which step, where the checkpoint is.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from os import PathLike
from typing import Any

from workbench._one_line import OneLine
from workbench.train.strategy import SingleDevice


class TrainingInterrupted(OneLine, KeyboardInterrupt):
    """Training stopped by an interrupt. ``str(error)`` is one line; ``step`` and ``checkpoint`` say where it
    stopped and what was saved (None: nothing), ``result`` is the fit's result when it stopped cleanly,
    ``signal`` the signal that asked (``SIGINT``: Ctrl-C or the stop button; ``SIGTERM``)."""

    def __init__(
        self,
        message: str,
        step: int,
        checkpoint: str | PathLike[str] | None,
        result: Any = None,
        by: signal.Signals = signal.SIGINT,
    ) -> None:
        super().__init__(message)
        self.step, self.checkpoint, self.result, self.signal = step, checkpoint, result, by

    @classmethod
    def of(
        cls, job: Any, line: str, result: Any = None, by: signal.Signals = signal.SIGINT
    ) -> TrainingInterrupted:
        """`line` about `job` (a `Trainer` or a `Launch`), with where it stopped and what it saved."""
        return cls(line, job.step, job.checkpoint, result, by)


def interrupted_line(job: Any, saved: bool, by: signal.Signals = signal.SIGINT) -> str:
    """What an interrupt (`by`) did to `job` (a `Job`: a `Trainer`, or a `Launch`'s worker processes), e.g.
    "stopped training (1 process on cpu) at step 120 of 460 after an interrupt; checkpoint
    runs/x/checkpoint.pt (fit(resume=True) continues from it)"."""
    what = job.describe().split(" (", 1)[0]  # "2 processes", "1 process on cpu"
    in_workers = job.worker_pids() is not None  # a launch: resuming is up to the user's function
    step, total, checkpoint = job.step, job.total_steps, job.checkpoint
    of = f" of {total}" if total else ""
    if saved:
        after = "an interrupt" if by == signal.SIGINT else by.name
        how = f"stopped training ({what}) at step {step}{of} after {after}"
    else:
        how = (
            f"quit training ({what}) at step {step}{of} without saving (interrupted twice, or no step ended)"
        )
    if checkpoint is None:
        return f"{how}; no checkpoint (give the Trainer a run= to keep one)"
    kind = "checkpoint" if saved else "last checkpoint"
    resume = "Trainer.fit(resume=True) in your function" if in_workers else "fit(resume=True)"
    return f"{how}; {kind} {checkpoint} ({resume} continues from it)"


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_interrupt(
    control: Any, *, on_first: Callable[[signal.Signals], None] | None = None, every_rank: bool = False
) -> Iterator[list[signal.Signals]]:
    """While the block runs in the main thread, the first SIGINT or SIGTERM calls ``control.stop()`` (with
    `every_rank`, for a rank its launcher signals itself: ``control.ask_stop()``, which the ranks agree on)
    and ``on_first(signal)``; a second raises KeyboardInterrupt. Yields a list that holds the first signal
    once one came. Does nothing without a `control` or in another thread, and leaves alone a signal that is
    ignored (SIGINT in a `launch` worker, whose launcher decides; a job started with ``&`` or ``nohup``)."""
    pressed: list[signal.Signals] = []
    if control is None or threading.current_thread() is not threading.main_thread():
        yield pressed
        return
    previous = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    previous = {
        number: handler for number, handler in previous.items() if handler not in (signal.SIG_IGN, None)
    }

    def stop(signum: int, frame: Any) -> None:
        if pressed:
            raise KeyboardInterrupt
        pressed.append(signal.Signals(signum))
        control.ask_stop() if every_rank else control.stop()
        if on_first is not None:
            on_first(pressed[0])

    for number in previous:
        signal.signal(number, stop)
    try:
        yield pressed
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextlib.contextmanager
def one_line_interrupts(job: Any) -> Iterator[list[signal.Signals]]:
    """Around a `Trainer`'s fit: `stop_on_interrupt` on its control, and a second interrupt's
    KeyboardInterrupt turned into `TrainingInterrupted` (quit, not saved). Not for one rank of several:
    ranks stop together only through their launcher."""
    alone = isinstance(job.strategy, SingleDevice)
    with stop_on_interrupt(job.control if alone else None, on_first=_say_stopping) as pressed:
        try:
            yield pressed
        except KeyboardInterrupt:
            if not pressed:
                raise
            raise TrainingInterrupted.of(
                job, interrupted_line(job, False, pressed[0]), by=pressed[0]
            ) from None


def after_interrupt(job: Any, pressed: list[signal.Signals], result: Any) -> Any:
    """`result`, or `TrainingInterrupted` raised when an interrupt stopped the fit (it saved): the cell or
    script ends there, in one line."""
    if not pressed or result.status != "stopped":
        return result
    raise TrainingInterrupted.of(job, interrupted_line(job, True, pressed[0]), result, pressed[0])


def again(by: signal.Signals) -> str:
    """What quits at once after `by` asked for a stop: "interrupt again", "SIGTERM again"."""
    return "interrupt again" if by == signal.SIGINT else f"{by.name} again"


def _say_stopping(by: signal.Signals) -> None:
    print(f"stopping after this step and saving ({again(by)}: quit without saving)", flush=True)
