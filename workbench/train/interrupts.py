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
import sys
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


class RanksStopped(OneLine, SystemExit):
    """Every rank of a launched job (torchrun, srun, mpirun; `from_env`) stopped at one step after a signal,
    saved: each rank's script ends with exit status 128 + the signal (143 for SIGTERM), as a process that
    signal ended and as `workbench train` does, so a batch script can tell a stop it may requeue from a
    failure. Rank 0 has printed ``str(error)``. ``step``, ``checkpoint``, ``result`` and ``signal`` (None
    on a rank that another rank's signal stopped) as in `TrainingInterrupted`.

    Example (what a rank's script ends with after SIGTERM, e.g. Slurm's warning before its time limit):
        >>> from types import SimpleNamespace
        >>> job = SimpleNamespace(step=40, checkpoint="runs/big/checkpoint.pt")  # what it reads of a Trainer
        >>> stopped = RanksStopped("stopped at step 40, saved", job, None, signal.SIGTERM)
        >>> stopped.code, stopped.step, stopped.signal.name, str(stopped)
        (143, 40, 'SIGTERM', 'stopped at step 40, saved')
    """

    def __init__(self, message: str, job: Any, result: Any, by: signal.Signals | None) -> None:
        super().__init__(128 + (by or signal.SIGTERM))
        self.message, self.step, self.checkpoint, self.result, self.signal = (
            message, job.step, job.checkpoint, result, by
        )  # fmt: skip

    def __str__(self) -> str:
        return self.message


def interrupted_line(job: Any, saved: bool, by: signal.Signals | None = signal.SIGINT) -> str:
    """What an interrupt (`by`) did to `job` (a `Job`: a `Trainer`, or a `Launch`'s worker processes), e.g.
    "stopped training (1 process on cpu) at step 120 of 460 after an interrupt; checkpoint
    runs/x/checkpoint.pt (fit(resume=True) continues from it)"."""
    what = job.describe().split(" (", 1)[0]  # "2 processes", "1 process on cpu"
    in_workers = job.worker_pids() is not None  # a launch: resuming is up to the user's function
    step, total, checkpoint = job.step, job.total_steps, job.checkpoint
    of = f" of {total}" if total else ""
    if saved:
        after = "another rank's signal" if by is None else "an interrupt" if by == signal.SIGINT else by.name
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
    KeyboardInterrupt turned into `TrainingInterrupted` (quit, not saved). One rank of several: only where
    its launcher signals every rank itself (`signalled_by_launcher`), and then the ranks agree on the stop;
    a `launch` worker's launcher stops the ranks through rank 0."""
    alone, together = isinstance(job.strategy, SingleDevice), _together(job.strategy)
    say = _say_stopping if alone else say_stopping_ranks if job.strategy.is_main else None
    control = job.control if alone or together else None
    with stop_on_interrupt(control, on_first=say, every_rank=together) as pressed:
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
    script ends there, in one line. Ranks stopped together by a signal (`stop_on_interrupt`'s `every_rank`)
    raise `RanksStopped` on every rank, rank 0 printing the line."""
    if result.status != "stopped":
        return result
    if _together(job.strategy) and (pressed or job.control.stop_agreed):
        by = pressed[0] if pressed else None
        line = interrupted_line(job, True, by)
        if job.strategy.is_main:
            print(f"workbench: {line}", file=sys.stderr, flush=True)
        raise RanksStopped(line, job, result, by)
    if not pressed:
        return result
    raise TrainingInterrupted.of(job, interrupted_line(job, True, pressed[0]), result, pressed[0])


def again(by: signal.Signals) -> str:
    """What quits at once after `by` asked for a stop: "interrupt again", "SIGTERM again"."""
    return "interrupt again" if by == signal.SIGINT else f"{by.name} again"


def _together(strategy: Any) -> bool:
    """One rank of several, whose launcher signals every rank itself (a strategy of your own may lack the
    attribute: no)."""
    return not isinstance(strategy, SingleDevice) and getattr(strategy, "signalled_by_launcher", False)


def _say_stopping(by: signal.Signals) -> None:
    print(f"stopping after this step and saving ({again(by)}: quit without saving)", flush=True)


def say_stopping_ranks(by: signal.Signals) -> None:
    """Rank 0's line when a signal asks every rank to stop (`stop_on_interrupt`'s `every_rank`)."""
    print(f"{by.name}: stopping every rank at the next logged step, saving ({again(by)}: quit)", flush=True)
