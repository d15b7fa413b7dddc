"""The launcher's side of running workers: start them (a fork server by default), relay their events and
the dashboard's controls, notice a failure, a hang or an early exit, stop everyone, and say which rank was
the cause and why (`WorkerFailed`). `Launch` owns the job; a `Supervisor` runs one of its `fit` calls."""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from workbench.parallel.launching._worker import (
    LauncherOutput,
    Payload,
    WorkerSpec,
    python_stacks,
    run_worker,
)
from workbench.parallel.launching.shared_arrays import SharedArrays
from workbench.parallel.launching.tracebacks import with_source_files
from workbench.train.control import ControlMessage, TrainControl
from workbench.train.events import CallbackList

_PRELOAD = [
    "workbench.parallel.launching._worker"
]  # imported once by the fork server: torch, torch.distributed
_POLL_S = 0.05
_TERMINATE_GRACE_S = 3.0
_COLLECT_ERRORS_S = 1.0  # after a failure, how long to wait for the other ranks' reports
# Errors a rank raises because *another* rank went away; they are consequences, not causes.
_LOST_PEER = ("Connection closed by peer", "Connection reset by peer")  # gloo's words for another rank's end
_CONSEQUENCES = (*_LOST_PEER, "DistBackendError", "Broken pipe")
# Errors of a rank that waited in a collective for one that never came (the one that never came is the cause)
_WAITED = ("Timed out", "timed out", "Timeout", "timeout")
_STACK_WAIT_S = 0.5


class WorkerFailed(RuntimeError):
    """A worker raised or was killed; every worker has been stopped. ``rank`` is the first that failed;
    ``summary`` is the message without the traceback or stacks that follow it (what a terminal shows): the
    cause first, then (when they came in time) what the other ranks raised because of it.

    Example:
        >>> from workbench.parallel import launch
        >>> def fails(strategy):
        ...     if strategy.rank == 1:
        ...         raise ValueError("no data on this rank")
        ...     strategy.barrier()
        >>> try:
        ...     launch(fails, nprocs=2, verbose=False)
        ... except WorkerFailed as failure:
        ...     lines = failure.summary.splitlines()
        ...     print(failure.rank, lines[0], lines[-1], sep="\\n")
        1
        rank 1 of 2 failed: ValueError: no data on this rank
        all 2 workers were stopped; launch again when fixed
    """

    def __init__(self, message: str, rank: int, summary: str | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.summary = message if summary is None else summary


class SupervisedJob(Protocol):
    """What a `Supervisor` reads and sets on the job it runs (a `Launch`)."""

    start_method: str
    verbose: bool
    timeout_s: float
    control: TrainControl
    events: CallbackList
    pids: list[int]
    step: int
    total_steps: int
    checkpoint: Any

    def describe(self, port: int | None = None) -> str: ...

    def terminating(self) -> bool: ...


class Supervisor:
    """Starts the workers, relays events and control, and stops everyone on a failure or interrupt."""

    def __init__(self, job: SupervisedJob, spec: WorkerSpec) -> None:
        self.job, self.spec = job, spec
        self.processes: list[multiprocessing.process.BaseProcess] = []
        self.events: dict[Connection, int] = {}  # read end → rank
        self.commands: Connection | None = None  # write end → rank 0
        self.reports: dict[int, tuple[str, str, str]] = {}  # rank → (error type, message, traceback)
        self.exited_at: dict[int, float] = {}
        self.done: set[int] = set()  # ranks whose function returned
        self.closed: set[int] = set()  # ranks whose event pipe closed: every message they sent was read
        self._paused = False
        self._stop_sent = False
        self.hung: dict[int, str] = {}  # rank → stacks of workers still running when another failed

    def run(self) -> None:
        with SharedArrays() as shared:  # its files outlive the workers, who map them
            self._start(shared)
            if shared.by_value and self.job.verbose:
                print(
                    f"launch: note: {len(shared.by_value)} large argument(s) copied to each worker instead "
                    f"of shared ({'; '.join(shared.by_value[:2])}); give {shared.folder.parent} more room "
                    "(docker run --shm-size=...) to share them",
                    flush=True,
                )
            try:
                self._watch()
            except BaseException:
                self._stop_workers()
                raise
            finally:
                for connection in [*self.events, self.commands]:
                    if connection is not None:
                        connection.close()

    def _start(self, shared: SharedArrays) -> None:
        method = self.job.start_method
        context = multiprocessing.get_context(method)
        if method == "forkserver":
            context.set_forkserver_preload(_PRELOAD)  # used when this process first starts its server
        payload = Payload.of(self.spec, shared)
        pipes = [context.Pipe(duplex=False) for _ in range(self.spec.world_size)]
        command_read, command_write = context.Pipe(duplex=False)
        everything = [end for pipe in pipes for end in pipe] + [command_read, command_write]
        for rank, (_, write) in enumerate(pipes):
            commands = command_read if rank == 0 else None
            # a forked worker inherits every pipe end and closes the others' (so EOFs reach the launcher);
            # the other start methods pass a worker only its own
            inherited = (
                [c for c in everything if c is not write and c is not commands] if method == "fork" else []
            )
            process = context.Process(
                target=run_worker,
                args=(rank, payload, LauncherOutput(), write, commands, inherited),
                name=f"workbench-rank{rank}",
                daemon=True,
            )
            with _main_not_rerun() if method != "fork" else contextlib.nullcontext():
                process.start()
            self.processes.append(process)
        self.job.pids = [p.pid for p in self.processes]
        for read, write in pipes:
            write.close()
            self.events[read] = len(self.events)
        command_read.close()
        self.commands = command_write

    def _watch(self) -> None:
        open_pipes = list(self.events)
        while True:
            for connection in wait(open_pipes, timeout=_POLL_S):
                if not self._receive(connection):
                    open_pipes.remove(connection)
                    self.closed.add(self.events[connection])
            self._forward_control()
            if self.job.terminating():
                raise KeyboardInterrupt("the launch was terminated; every worker was stopped")
            now = time.monotonic()
            for rank, process in enumerate(self.processes):
                if process.exitcode is not None and rank not in self.exited_at:
                    self.exited_at[rank] = now
            if any(p.exitcode not in (None, 0) for p in self.processes) or self._left_early():
                self._fail()
            if all(p.exitcode == 0 for p in self.processes) and not open_pipes:
                return

    def _receive(self, connection: Connection) -> bool:
        """Handle one message; False when the pipe is closed (the worker exited)."""
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return False
        kind, rank = message[0], self.events[connection]
        if kind == "event":
            _, hook, event = message
            if hook == "on_step" or event.get("rank", rank) == 0:
                self._relay(hook, event)
        elif kind == "error":
            self.reports[rank] = message[2:]
        elif kind == "done":
            self.done.add(rank)
        return True

    def _left_early(self) -> list[int]:
        """Ranks that exited with code 0 before their function returned (os._exit(0) in it)."""
        return [
            rank
            for rank, process in enumerate(self.processes)
            if process.exitcode == 0
            and rank in self.closed
            and rank not in self.done
            and rank not in self.reports
        ]

    def _relay(self, hook: str, event: dict[str, Any]) -> None:
        if hook == "on_fit_start":
            event = {**event, "launch": self.job.describe(self.spec.port)}
            self.job.total_steps = event["total_steps"]
        elif hook == "on_step" and event.get("rank", 0) == 0:
            self.job.step = event["step"]
        elif hook == "on_fit_end":  # where rank 0 ended (steps between logged ones too), what it saved
            self.job.step, self.job.checkpoint = event.get("step", self.job.step), event.get("checkpoint")
        getattr(self.job.events, hook)(event)

    def _forward_control(self) -> None:
        control, commands = self.job.control, self.commands
        if commands is None or self._stop_sent:
            return
        message = ControlMessage.take(control, self._paused)
        if message.empty():
            return
        try:
            commands.send(message.encode())
        except (BrokenPipeError, OSError):  # rank 0 is gone; _watch reports why
            self.commands = None
            return
        self._stop_sent = message.stop
        self._paused = message.paused if message.paused is not None else self._paused

    def _fail(self) -> None:
        """Collect what the ranks report for a moment, stop them all, raise WorkerFailed."""
        deadline = time.monotonic() + _COLLECT_ERRORS_S
        open_pipes = [c for c in self.events if not c.closed]
        while time.monotonic() < deadline and open_pipes:
            for connection in wait(open_pipes, timeout=_POLL_S):
                if not self._receive(connection):
                    open_pipes.remove(connection)
        for rank, process in enumerate(self.processes):
            if process.exitcode is not None:
                self.exited_at.setdefault(rank, time.monotonic())
        self.hung = self._stacks_of_live_workers()
        self._stop_workers()
        raise self._failure()

    def _stacks_of_live_workers(self) -> dict[int, str]:
        """Rank → Python stacks of every worker still running after another failed (asked by signal)."""
        live = {
            rank: p.pid for rank, p in enumerate(self.processes) if p.exitcode is None and p.pid is not None
        }
        return python_stacks(live, self.spec.result_dir, _STACK_WAIT_S)

    def _failure(self) -> WorkerFailed:
        hung = self._hung_failure()
        if hung is not None:
            return hung
        early = self._left_early()
        failed = [
            r
            for r, p in enumerate(self.processes)
            if (p.exitcode not in (None, 0) or r in early) and r in self.exited_at
        ]

        def cause_first(rank: int) -> tuple[int, float, int]:
            code = self.processes[rank].exitcode or 0
            report = self.reports.get(rank)
            consequence = report is not None and any(m in " ".join(report[:2]) for m in _CONSEQUENCES)
            killed = (code < 0 and report is None) or rank in early
            return (0 if killed else 2 if consequence else 1, self.exited_at[rank], rank)

        failed.sort(key=cause_first)
        lines = [self._describe_exit(rank) for rank in failed]
        first = failed[0]
        message = f"rank {first} of {self.spec.world_size} failed: {lines[0]}"
        if len(lines) > 1:
            later = zip(failed[1:], lines[1:], strict=True)
            message += "\nthen " + "\n".join(f"rank {rank}: {line}" for rank, line in later)
        message += f"\nall {self.spec.world_size} workers were stopped; launch again when fixed"
        summary, report = message, self.reports.get(first)
        if report is not None and report[2].startswith("Traceback"):  # frames to show, not only a line
            message += f"\n\nrank {first} traceback:\n{with_source_files(report[2], self.spec.fn)}"
        return WorkerFailed(message, first, summary)

    def _hung_failure(self) -> WorkerFailed | None:
        """A rank that gave up waiting in a collective while another was still running: the running one hung
        (it never reached the collective), so it is named, with its stack; None if that is not the case."""
        waited = [rank for rank, report in self.reports.items() if any(word in report[1] for word in _WAITED)]
        silent = [rank for rank in self.hung if rank not in self.reports]
        if not waited or not silent:
            return None
        rank = min(silent)
        waiting = ", ".join(
            f"rank {r} ({self.reports[r][0]}: {self.reports[r][1].splitlines()[0]})" for r in waited
        )
        message = (
            f"rank {rank} of {self.spec.world_size} hung: it was still running when {waiting} gave up "
            f"waiting for it after timeout_s={self.job.timeout_s:g}; all {self.spec.world_size} workers were "
            "stopped"
        )
        summary, stacks = message, self.hung[rank]
        if stacks:
            message += f"\n\nrank {rank} was here (Python stacks, most recent call first):\n{stacks}"
        return WorkerFailed(message, rank, summary)

    def _describe_exit(self, rank: int) -> str:
        code = self.processes[rank].exitcode or 0
        report = self.reports.get(rank)
        if report is not None:  # what it raised, even if it then died of a signal on the way out
            lost = next((m for m in _LOST_PEER if m in report[1]), None)
            if lost is not None:  # gloo's paragraph (it ends "GLHF!") in one line
                return f"{report[0]}: lost the connection to another rank (gloo: {lost})"
            return f"{report[0]}: {report[1]}"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"killed by {name} (out of memory, or killed from outside?)"
        if code == 0 and rank not in self.done:
            return "exited with code 0 before its function returned (os._exit in it?)"
        return f"exited with code {code}"

    def _stop_workers(self) -> None:
        """SIGTERM every live worker, SIGKILL those still there after a grace period, reap them all."""
        alive = [p for p in self.processes if p.exitcode is None]
        for process in alive:
            process.terminate()
        deadline = time.monotonic() + _TERMINATE_GRACE_S
        for process in alive:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in alive:
            if process.exitcode is None:
                process.kill()
                process.join()
        for process in self.processes:
            process.join()


@contextlib.contextmanager
def _main_not_rerun() -> Iterator[None]:
    """Start processes without multiprocessing re-running this program's main script in them.

    forkserver and spawn import ``__main__`` again in each child (by path or module name) so that pickled
    references into it resolve; a script without an ``if __name__ == "__main__":`` guard would then launch
    again from inside its workers. The payload carries everything the workers need by value (cloudpickle),
    so the main module is hidden from `multiprocessing.spawn.get_preparation_data` for the ``start()``.
    """
    main = sys.modules["__main__"]
    missing = object()
    saved = {name: getattr(main, name, missing) for name in ("__file__", "__spec__")}
    main.__spec__ = None
    if saved["__file__"] is not missing:
        del main.__file__
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is not missing:
                setattr(main, name, value)
