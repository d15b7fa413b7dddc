"""Persistent, interactive ranks: N processes in one process group that run notebook cells on request.

`launch` runs a function once; a `RankPool` keeps its ranks, each with a namespace of its own, so a learner
can call ``dist.all_reduce`` in one cell and look at every rank's tensor in the next. Ranks start as `launch`
workers do (fork server, cloudpickle; gloo on CPU, nccl with a GPU each) and run `rank_server.serve_cells`.
``%%ranks`` (`workbench.widgets.rank_cells`, ``%load_ext workbench``) is the notebook's face of it.

    >>> pool = RankPool(2).start()
    >>> run = pool.run("t = torch.ones(1) * (rank + 1)\\ndist.all_reduce(t)\\nprint(t.item())")
    >>> [run.text(rank) for rank in pool.ranks]
    ['3.0\\n', '3.0\\n']
    >>> pool.pull("t")
    [tensor([3.]), tensor([3.])]
    >>> pool.stop()
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import cloudpickle

from workbench._validate import check_int, check_positive
from workbench.parallel.launching._worker import (
    LauncherOutput,
    Payload,
    WorkerSpec,
    dumps_by_value,
    python_stacks,
    run_worker,
)
from workbench.parallel.launching.launcher import Launch, free_port
from workbench.parallel.launching.rank_messages import (
    CellRun,
    Pull,
    Push,
    RankCell,
    RankFailure,
    Ready,
    RunCell,
    Stop,
    ValueReply,
)
from workbench.parallel.launching.rank_server import serve_cells
from workbench.parallel.launching.shared_arrays import SharedArrays
from workbench.parallel.launching.supervisor import _PRELOAD, _main_not_rerun
from workbench.train.events import Callback, CallbackList

_POLL_S = 0.05
_INTERRUPT_GRACE_S = 2.0  # how long an interrupted cell has to end before its rank counts as stuck
_STOP_GRACE_S = 5.0
_STACK_WAIT_S = 0.5


class PoolError(RuntimeError):
    """The pool cannot do what was asked (not started, stuck, a rank gone); the message says what to do."""


class RankPool:
    """N persistent rank processes for interactive cells (``%%ranks``); also a context manager.

    Args:
        nprocs: ranks, as for `launch` (on GPUs, one per GPU).
        backend: ``"gloo"`` or ``"nccl"``; default as `launch` (nccl with a GPU per rank).
        threads_per_process: torch threads per rank on CPU (default: cores // nprocs, at least 1).
        timeout_s: how long a collective waits for a missing rank before it fails (the process group's
            timeout; short, because a person waits at the other end).
        start_method: as for `launch`.
    """

    def __init__(
        self,
        nprocs: int,
        *,
        backend: str | None = None,
        threads_per_process: int | None = None,
        timeout_s: float = 300,
        start_method: str = "forkserver",
    ) -> None:
        # Launch checks the settings as `launch` does (nprocs, backend, GPUs, threads, start method)
        self._launch = Launch(
            serve_cells,
            nprocs,
            args=(None,),  # serve_cells's connection, which `start` gives each rank (its own WorkerSpec)
            backend=backend,
            threads_per_process=threads_per_process,
            timeout_s=check_positive("timeout_s", timeout_s),
            start_method=start_method,
            verbose=False,
        )
        self.nprocs = nprocs
        self.events = CallbackList([])  # trainer events of the ranks (every on_step, rank 0's others)
        self.processes: list[multiprocessing.process.BaseProcess] = []
        self.connections: dict[int, Connection] = {}
        self.devices: dict[int, str] = {}
        self.cells_run = 0
        self.stuck = ""  # why the pool cannot take another cell until it restarts
        self.errors: dict[int, tuple[str, str, str]] = {}  # rank → what its serving loop raised
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._shared: SharedArrays | None = None
        self._drain: threading.Thread | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def ranks(self) -> list[int]:
        return list(range(self.nprocs))

    @property
    def started(self) -> bool:
        return bool(self.processes)

    def describe(self) -> str:
        """One line: ranks, backend, devices, state."""
        where = self._launch.describe().split(" on ")[0]
        if not self.started:
            return f"{where}: not started"
        alive = sum(p.exitcode is None for p in self.processes)
        state = f"stuck: {self.stuck}" if self.stuck else f"{alive} of {self.nprocs} alive"
        pids = ", ".join(str(p.pid) for p in self.processes)
        return f"{where}; {state}; {self.cells_run} cell(s) run; pids {pids}"

    def add_callback(self, callback: Callback) -> None:
        """Subscribe `callback` to the trainer events of cells that train (e.g. a progress bar)."""
        self.events.callbacks.append(callback)

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self, timeout_s: float = 120) -> RankPool:
        """Start the ranks and wait until each has joined the process group; returns the pool."""
        if self.started:
            raise PoolError(f"the pool is already running ({self.describe()}); stop it first")
        launch = self._launch
        self._folder = tempfile.TemporaryDirectory(prefix="workbench-ranks-")
        self._shared = SharedArrays()
        port = free_port(launch.addr)
        spec = WorkerSpec(
            serve_cells, (), None, self.nprocs, launch.backend, launch.addr, port, launch.threads,
            launch.timeout_s, Path(self._folder.name),
        )  # fmt: skip
        context = multiprocessing.get_context(launch.start_method)
        if launch.start_method == "forkserver":
            context.set_forkserver_preload(_PRELOAD)
        payload = Payload.of(spec, self._shared)
        events_read: list[Connection] = []
        for rank in self.ranks:
            mine, theirs = context.Pipe(duplex=True)
            read, write = context.Pipe(duplex=False)
            process = context.Process(
                target=run_worker,
                args=(rank, payload, LauncherOutput(), write, None, [], theirs),
                name=f"workbench-rank{rank}",
                daemon=True,
            )
            with _main_not_rerun() if launch.start_method != "fork" else contextlib.nullcontext():
                process.start()
            write.close()
            theirs.close()
            self.processes.append(process)
            self.connections[rank] = mine
            events_read.append(read)
        self._finalizer = weakref.finalize(self, _kill, list(self.processes), self._folder, self._shared)
        self._drain = threading.Thread(
            target=self._relay_events, args=(events_read,), name="workbench-ranks-events", daemon=True
        )
        self._drain.start()
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        waiting, deadline = set(self.ranks), time.monotonic() + timeout_s
        while waiting:
            for rank in list(waiting):
                if self.processes[rank].exitcode is not None:
                    self.stop()
                    raise PoolError(
                        f"rank {rank} did not start: {self._exit_reason(rank)}; no rank is running"
                    )
            ready = wait([self.connections[r] for r in waiting], timeout=_POLL_S)
            for connection in ready:
                rank = self._rank_of(connection)
                with contextlib.suppress(EOFError, OSError):
                    reply = connection.recv()
                    if isinstance(reply, Ready):
                        self.devices[rank] = reply.device
                        waiting.discard(rank)
            if waiting and time.monotonic() > deadline:
                self.stop()
                raise PoolError(
                    f"rank(s) {sorted(waiting)} did not join the process group within {timeout_s:g} s; every "
                    "rank was stopped"
                )

    def stop(self) -> None:
        """Stop every rank (their namespaces are lost), leaving no process or file behind."""
        for connection in self.connections.values():
            with contextlib.suppress(OSError, ValueError):
                connection.send(Stop())
        deadline = time.monotonic() + (0.2 if self.stuck else _STOP_GRACE_S)
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
        if self._finalizer is not None:
            self._finalizer()  # what is still alive is killed; the files removed
        for connection in self.connections.values():
            connection.close()
        if self._drain is not None:
            self._drain.join(timeout=2)
        self.processes, self.connections, self.devices = [], {}, {}
        self.stuck, self.errors, self._drain, self._finalizer = "", {}, None, None

    def restart(self) -> RankPool:
        """`stop`, then `start` with the same settings (fresh namespaces)."""
        self.stop()
        return self.start()

    def __enter__(self) -> RankPool:
        return self if self.started else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------- cells

    def run(
        self,
        code: str,
        ranks: Iterable[int] | None = None,
        timeout_s: float | None = None,
        on_update: Callable[[CellRun], None] | None = None,
    ) -> CellRun:
        """Run `code` on every rank (or `ranks`) at once; wait for all; each rank's output and errors.

        `timeout_s`: after it, the ranks still running are named with their Python stacks and interrupted.
        `on_update`: called with the run after each output arrives (a live view). An interrupt
        (KeyboardInterrupt while waiting) interrupts the cell on the ranks; the run comes back with
        ``interrupted`` set.
        """
        chosen = self._chosen(ranks)
        if timeout_s is not None:
            check_positive("timeout_s", timeout_s)
        self.cells_run += 1
        run = CellRun({rank: RankCell(rank) for rank in chosen})
        for rank in chosen:
            self._send(rank, RunCell(code, self.cells_run))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            self._collect(run, deadline, on_update)
        except KeyboardInterrupt:
            run.interrupted = True
            self._interrupt(run, on_update)
            return run
        if not all(cell.done for cell in run.cells.values()):
            run.timed_out_after = timeout_s
            self._interrupt(run, on_update)
        return run

    def _collect(
        self, run: CellRun, deadline: float | None, on_update: Callable[[CellRun], None] | None
    ) -> None:
        while not all(cell.done for cell in run.cells.values()):
            if deadline is not None and time.monotonic() > deadline:
                return
            running = [self.connections[r] for r, cell in run.cells.items() if not cell.done]
            for connection in wait(running, timeout=_POLL_S):
                rank = self._rank_of(connection)
                try:
                    reply = connection.recv()
                except (EOFError, OSError):
                    self._lost(run, rank)
                    continue
                run.cells[rank].record(reply)
                if on_update is not None:
                    on_update(run)

    def _lost(self, run: CellRun, rank: int) -> None:
        self.processes[rank].join(1)
        reason = self._exit_reason(rank)
        run.cells[rank].seconds = 0.0
        run.cells[rank].failure = RankFailure("RankLost", f"rank {rank} exited: {reason}", "")
        self.stuck = f"rank {rank} exited ({reason})"

    def _interrupt(self, run: CellRun, on_update: Callable[[CellRun], None] | None) -> None:
        """Take the stacks of the ranks still running, SIGINT them, wait a moment for their cells to end;
        those that do not (stuck inside a collective's C++ wait) make the pool stuck."""
        running = [rank for rank, cell in run.cells.items() if not cell.done]
        stacks = self._stacks(running)
        for rank in running:
            run.cells[rank].stacks = stacks.get(rank, "")
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.processes[rank].pid, signal.SIGINT)
        with contextlib.suppress(KeyboardInterrupt):  # a second press while we wait
            self._collect(run, time.monotonic() + _INTERRUPT_GRACE_S, on_update)
        run.stuck = [rank for rank, cell in run.cells.items() if not cell.done]
        if run.interrupted:  # the person pressed stop: only a rank that did not stop needs its stack shown
            for rank, cell in run.cells.items():
                cell.stacks = cell.stacks if rank in run.stuck else ""
        if run.stuck:
            self.stuck = (
                f"rank(s) {', '.join(map(str, run.stuck))} did not end their cell (waiting inside a "
                "collective that the other ranks did not call?)"
            )

    def _stacks(self, ranks: list[int]) -> dict[int, str]:
        if self._folder is None:
            return {}
        pids = {rank: self.processes[rank].pid for rank in ranks}
        dumps = python_stacks(pids, Path(self._folder.name), _STACK_WAIT_S)
        return {rank: _main_thread_stack(dump) for rank, dump in dumps.items()}

    # ------------------------------------------------------------------------------------------- values

    def pull(self, name: str, rank: int | None = None) -> Any:
        """The value of `name` on `rank`, or a list of every rank's (index = rank); tensors on the CPU."""
        ranks = self._chosen(None if rank is None else [rank])
        for r in ranks:
            self._send(r, Pull(name))
        values = [cloudpickle.loads(reply.pickled) for reply in self._answers(ranks, name)]
        return values[0] if rank is not None else values

    def push(self, name: str, value: Any, ranks: Iterable[int] | None = None) -> None:
        """Bind `name` to `value` on every rank (or `ranks`); functions and classes of the notebook travel by
        value."""
        if not name.isidentifier():
            raise ValueError(f"name must be a Python identifier, got {name!r}")
        pickled = dumps_by_value(value, value)
        chosen = self._chosen(ranks)
        for r in chosen:
            self._send(r, Push(name, pickled))
        self._answers(chosen, name)

    def _answers(self, ranks: list[int], name: str) -> list[ValueReply]:
        """Every rank's answer, all read before a problem is raised (none is left for the next request)."""
        replies = [self._answer(rank, name) for rank in ranks]
        problem = next((reply.problem for reply in replies if reply.problem), "")
        if problem:
            raise PoolError(problem)
        return replies

    def _answer(self, rank: int, name: str) -> ValueReply:
        try:
            reply = self.connections[rank].recv()
        except (EOFError, OSError):
            self.stuck = f"rank {rank} exited ({self._exit_reason(rank)})"
            raise PoolError(f"rank {rank} exited; restart the pool") from None
        if not isinstance(reply, ValueReply) or reply.name != name:
            self.stuck = f"rank {rank} answered out of turn ({type(reply).__name__})"
            raise PoolError(f"rank {rank} answered out of turn; restart the pool")
        return reply

    # ------------------------------------------------------------------------------------------- helpers

    def _chosen(self, ranks: Iterable[int] | None) -> list[int]:
        if not self.started:
            raise PoolError("no ranks are running; start them first (%ranks start N, or RankPool(N).start())")
        if self.stuck:
            raise PoolError(
                f"the pool is stuck: {self.stuck}; restart it (%ranks restart, or pool.restart()): its "
                "ranks start fresh, their variables are lost"
            )
        if ranks is None:
            return self.ranks
        chosen = sorted({check_int("rank", r, minimum=0) for r in ranks})
        wrong = [r for r in chosen if r >= self.nprocs]
        if wrong or not chosen:
            raise ValueError(
                f"ranks must be among 0..{self.nprocs - 1} of this pool of {self.nprocs}, got "
                f"{wrong or 'none'}"
            )
        return chosen

    def _send(self, rank: int, request: object) -> None:
        try:
            self.connections[rank].send(request)
        except (OSError, ValueError):
            self.stuck = f"rank {rank} exited ({self._exit_reason(rank)})"
            raise PoolError(f"rank {rank} exited ({self._exit_reason(rank)}); restart the pool") from None

    def _rank_of(self, connection: object) -> int:
        return next(rank for rank, c in self.connections.items() if c is connection)

    def _exit_reason(self, rank: int) -> str:
        if rank in self.errors:
            error, message, _ = self.errors[rank]
            return f"{error}: {message.splitlines()[0] if message else ''}"
        code = self.processes[rank].exitcode
        if code is None:
            return "still running"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def _relay_events(self, pipes: list[Connection]) -> None:
        """Hand the ranks' trainer events to `events`; note what a rank's loop raised (a thread)."""
        open_pipes = list(pipes)
        while open_pipes:
            for connection in wait(open_pipes, timeout=0.2):
                try:
                    message = connection.recv()
                except (EOFError, OSError):
                    open_pipes.remove(connection)
                    continue
                if message[0] == "event":
                    with contextlib.suppress(Exception):  # a view's failure must not stop the relay
                        getattr(self.events, message[1])(message[2])
                elif message[0] == "error":
                    self.errors[message[1]] = message[2:]
        for connection in pipes:
            connection.close()


def _main_thread_stack(dump: str) -> str:
    """The stack of the thread that runs the cell, from a faulthandler dump of all threads."""
    blocks = [block.strip() for block in dump.split("\n\n") if block.strip()]
    in_cell = [b for b in blocks if "<rank cell" in b or "serve_cells" in b]
    return (in_cell or blocks or [""])[0]


def _kill(
    processes: list[multiprocessing.process.BaseProcess],
    folder: tempfile.TemporaryDirectory[str] | None,
    shared: SharedArrays | None,
) -> None:
    """Kill what is still alive and remove the pool's files (also at interpreter exit)."""
    for process in processes:
        if process.exitcode is None:
            process.kill()
    for process in processes:
        process.join(5)
    if shared is not None:
        shared.close()
    if folder is not None:
        folder.cleanup()
