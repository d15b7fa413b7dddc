"""`JobRunner`: a `Job` run on a background thread, waited for from a script or a notebook cell.

The runner owns the thread, the result or error, and what an interrupt means: stop at the next step
boundary, and terminate the job (a `Launch`'s workers) if it does not get there within a grace period. A view
such as the `Dashboard` only draws and forwards its buttons; it asks a runner to run the job.

    runner = JobRunner(trainer)
    runner.start()                        # training goes on in the background
    result = runner.wait()                # scripts; a notebook cell: result = await runner.wait_async()
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from workbench._jupyter import after_each_cell
from workbench.devices import openmp
from workbench.train.interrupts import TrainingInterrupted, interrupted_line
from workbench.train.job import Job

GRACE_S = 5.0  # after an interrupt, how long the job gets to stop at a step boundary before it is terminated


class JobRunner:
    """Runs `job` on a thread (`start`) or the calling one (`run_here`); `before` runs on the caller before
    each run, `after` on the run's thread when it ends, also when the job fails.

    Example:
        >>> from workbench.presets import build_experiment
        >>> from workbench.train import Trainer
        >>> e = build_experiment("regression-linear", n_samples=2000, epochs=1)
        >>> runner = JobRunner(Trainer(e.model, e.loss_fn, e.splits, e.config))
        >>> runner.start()
        >>> runner.wait().status
        'finished'
    """

    def __init__(
        self,
        job: Job,
        *,
        before: Callable[[], None] = lambda: None,
        after: Callable[[], None] = lambda: None,
        grace_s: float = GRACE_S,
    ) -> None:
        self.job, self._before, self._after, self.grace_s = job, before, after, grace_s
        self.thread: threading.Thread | None = None
        self.result: Any = None  # the job's return value: a FitResult, or rank 0's value for a Launch
        self.error: BaseException | None = None

    @property
    def running(self) -> bool:
        """True while the background thread runs."""
        return self.thread is not None and self.thread.is_alive()

    def start(self, resume: bool = False) -> None:
        """Run the job on a background thread; `resume` as in `Trainer.fit`."""
        self._refuse_if_running()
        self._begin()
        openmp.release_idle_threads()  # this thread's idle OpenMP team would slow the job's CPU ops 2-4x
        self.thread = threading.Thread(target=self._run, args=(resume,), name="workbench-train", daemon=True)
        self.thread.start()
        # Run All goes on with the next cells meanwhile; the hook is this run's (a Start button pressed
        # again, with no cell between, adds one for its own thread while this one's lies idle)
        after_each_cell(functools.partial(_release_cell_threads, self.thread))

    def run_here(self, resume: bool = False) -> Any:
        """Run the job on the calling thread; return its result or raise its error."""
        self._refuse_if_running()
        self._begin()
        self.thread = None
        self._run(resume)
        return self.outcome()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the job ends; return its result or raise its error. An interrupt stops the job at a
        step boundary (terminated after `grace_s`) and raises one line saying what was stopped."""
        thread = self._started_thread()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while thread.is_alive():
                self._check_deadline(deadline, timeout)
                thread.join(0.1)
        except KeyboardInterrupt:
            self._stop_after_interrupt()
        return self.outcome()

    async def wait_async(self, timeout: float | None = None) -> Any:
        """`wait` for a notebook cell: the kernel handles widget messages while the cell awaits."""
        thread = self._started_thread()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while thread.is_alive():
                self._check_deadline(deadline, timeout)
                await asyncio.sleep(0.05)
        except (KeyboardInterrupt, asyncio.CancelledError):  # an interrupt cancels an awaiting cell
            self._stop_after_interrupt()
        return self.outcome()

    def join(self) -> None:
        """Wait for the background thread, if any, without raising the job's error."""
        if self.thread is not None:
            self.thread.join()

    def outcome(self) -> Any:
        """The last run's result, or its error raised."""
        if self.error is not None:
            raise self.error
        return self.result

    def _begin(self) -> None:
        self.result, self.error = None, None
        self.job.control.reset()
        self._before()

    def _run(self, resume: bool) -> None:
        try:
            self.result = self.job.fit(resume=resume)
        except BaseException as error:  # re-raised by wait(); a view shows it from the job's events
            self.error = error
        finally:
            self._after()

    def _refuse_if_running(self) -> None:
        if self.running:
            raise RuntimeError("training is already running; Stop it or wait() for it first")

    def _started_thread(self) -> threading.Thread:
        if self.thread is None:
            raise RuntimeError("nothing to wait for: call start() (or press Start) first")
        return self.thread

    @staticmethod
    def _check_deadline(deadline: float | None, timeout: float | None) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"training still running after {timeout} s")

    def _stop_after_interrupt(self) -> None:
        """Stop at a step boundary (terminate after `grace_s`), then raise one line saying what stopped."""
        thread = self._started_thread()
        self.job.control.stop()
        thread.join(self.grace_s)
        terminated = thread.is_alive()
        if terminated:
            self.job.terminate()  # e.g. a Launch's workers that do not reach a step boundary in time
        thread.join()
        saved = not terminated and self.error is None
        line = interrupted_line(self.job, saved)
        if terminated:
            what, after = self.job.describe().split(" (", 1)[0], line.split("; ", 1)[1]
            line = f"terminated {what}: no step boundary within {self.grace_s:g} s of the interrupt; {after}"
        raise TrainingInterrupted.of(self.job, line, self.result if saved else None) from None


def _release_cell_threads(job_thread: threading.Thread) -> bool:
    """After a notebook cell that ran while `job_thread` trains: free the OpenMP team the cell's torch ops
    built on the kernel's thread, as `JobRunner.start` did (else the job's CPU ops stay ~2x slower once the
    cell ended, 2 cores, 2026-11-29); False once that thread has ended (no longer called)."""
    if not job_thread.is_alive():
        return False
    openmp.release_idle_threads()
    return True
