"""Run a training function on N processes from a notebook cell: ``launch(fn, nprocs=2)``.

Workers start from a fork server by default: a clean process that has imported torch but never run it, so a
worker is safe whatever this process did before (torch ops on several threads, whose OpenMP pool a plain
fork inherits and hangs on; CUDA already in use). The function, its arguments and the strategy reach the
workers through cloudpickle, so functions and classes defined in the notebook work. Tensors and NumPy
arrays of 1 MiB or more (your dataset) are written once to shared memory and mapped copy-on-write by every
worker, so they cost one copy whatever the number of ranks and still behave as each worker's own
(`workbench.parallel.shared_arrays`); a module's parameters and buffers are copied, each rank trains its
own. The workers join a process group on a free
port of 127.0.0.1, and each calls ``fn(strategy, *args)`` with the strategy bound to that group: a
`DataParallel` unless ``strategy=`` names another (`FullyShardedDataParallel`, `PipelineParallel`,
`TensorParallel`), which is checked against ``model=`` and ``config=`` before any process starts. While they
run, their events (loss, throughput per rank, evaluations) stream back through pipes to the callbacks given
here, e.g. a `Dashboard`, and the dashboard's pause/stop/lr requests go to the workers. When they finish,
`launch` returns rank 0's return value and, with ``model=``, loads rank 0's trained weights into your model.

If a worker raises or dies, the others are stopped and `WorkerFailed` names the rank and its error;
interrupting the kernel stops every worker. No process, port or thread is left behind either way.

    def train(strategy):
        trainer = Trainer(model, loss_fn, splits, config, strategy=strategy)
        return trainer.fit().metrics

    metrics = launch(train, nprocs=2, model=model)     # `model` now holds the trained weights
    launch(train, 2, strategy=PipelineParallel(schedule="gpipe"), model=model, config=config)
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import torch

from workbench._validate import check_choice, check_int, check_positive
from workbench.parallel._worker import (
    RESULT_FILE,
    STACK_SIGNAL,
    LauncherOutput,
    Payload,
    WorkerSpec,
    run_worker,
    stack_file,
)
from workbench.parallel.data_parallel import DataParallel
from workbench.parallel.distributed import DistributedStrategy
from workbench.parallel.process_group import BACKENDS, default_backend, visible_gpus
from workbench.parallel.shared_arrays import SharedArrays
from workbench.train.config import TrainConfig
from workbench.train.control import TrainControl
from workbench.train.events import Callback, CallbackList
from workbench.train.progress import ConsoleProgress

START_METHODS = ("forkserver", "spawn", "fork")
_PRELOAD = ["workbench.parallel._worker"]  # imported once by the fork server: torch, torch.distributed
_POLL_S = 0.05
MAX_TIMEOUT_S = 7 * 24 * 3600
MAX_PROCESSES_PER_CORE = 4
_TERMINATE_GRACE_S = 3.0
_COLLECT_ERRORS_S = 1.0  # after a failure, how long to wait for the other ranks' reports
# Errors a rank raises because *another* rank went away; they are consequences, not causes.
_CONSEQUENCES = ("Connection closed by peer", "Connection reset by peer", "DistBackendError", "Broken pipe")
# Errors of a rank that waited in a collective for one that never came (the one that never came is the cause)
_WAITED = ("Timed out", "timed out", "Timeout", "timeout")
_STACK_WAIT_S = 0.5


class WorkerFailed(RuntimeError):
    """A worker raised or was killed; every worker has been stopped. ``rank`` is the first that failed."""

    def __init__(self, message: str, rank: int) -> None:
        super().__init__(message)
        self.rank = rank


def launch(fn: Callable[..., Any], nprocs: int, *, progress: bool | None = None, **options: Any) -> Any:
    """Run ``fn(strategy, *args)`` on `nprocs` processes; return rank 0's return value.

    ``launch(fn, nprocs, **options)`` is ``Launch(fn, nprocs, **options).fit()`` with a progress bar; the
    options:

    Args:
        fn: the per-rank training function; its first argument is the strategy, bound to the process group
            (pass it to ``Trainer(..., strategy=strategy)``). It may be defined in the notebook.
        nprocs: processes (ranks), ≥ 1; on GPUs at most the number of GPUs (one each).
        args: more arguments for `fn`.
        strategy: how the ranks share the work: `DataParallel()` (the default), `FullyShardedDataParallel`,
            `PipelineParallel` or `TensorParallel` (with their options). Checked before anything starts,
            against `model` and `config` where given (split points, micro-batches, the tensor plan...).
        model: the model `fn` trains; after training, rank 0's trained weights are loaded into it (the
            whole model, gathered from the ranks' shards or stages).
        config: the `TrainConfig` `fn` trains with (for the checks, e.g. micro-batches vs batch_size).
        callbacks: receive every rank's ``on_step`` and rank 0's other events, in this process, live.
        control: requests (pause, stop, lr, clipping) forwarded to the workers' trainers.
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (GPUs); default nccl when torch sees a GPU.
        threads_per_process: torch threads per worker on CPU (default: CPU cores // nprocs, at least 1).
        addr, port: the rendezvous address; the port defaults to a free one.
        timeout_s: how long a collective waits for a missing rank before failing.
        verbose: print one line saying what runs where (world size, backend, devices, port).
        progress: a text progress bar of rank 0's steps with loss and lr, and each evaluation, on stderr
            (in a notebook cell and a terminal alike); default: as `verbose`. A `Dashboard` shows more.
        start_method: ``"forkserver"`` (default: safe after anything; the first launch of a kernel also
            starts the server, about a second), ``"spawn"`` (a fresh interpreter per worker: slowest) or
            ``"fork"`` (fastest start and arguments shared copy-on-write, but it hangs if this process ran
            torch on more than one thread and cannot use CUDA once this process has: refused then).

    Raises:
        WorkerFailed: a worker raised or died (the message names the rank and its error), or hung: it
            was still running when another gave up waiting for it in a collective after `timeout_s`; the
            hung rank is named (``.rank``), with its Python stacks.
        RuntimeError: ``start_method="fork"`` while CUDA is initialised in this process.
        ValueError: bad arguments, e.g. nprocs < 1, more processes than GPUs, a port in use.

    Example:
        >>> def world(strategy, greeting):
        ...     return f"{greeting} from rank {strategy.rank} of {strategy.world_size}"
        >>> launch(world, nprocs=2, args=("hello",), verbose=False)
        'hello from rank 0 of 2'
    """
    if progress if progress is not None else options.get("verbose", True):
        options["callbacks"] = [*options.get("callbacks", ()), ConsoleProgress()]
    return Launch(fn, nprocs, **options).fit()


def usable_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_nprocs(nprocs: object) -> int:
    """`nprocs` if this machine can run that many processes; ValueError with the limit otherwise."""
    check_int("nprocs", nprocs, minimum=1)
    cores = usable_cores()
    most = max(MAX_PROCESSES_PER_CORE * cores, 16)
    if nprocs > most:
        raise ValueError(
            f"nprocs={nprocs} processes on {cores} CPU cores would thrash this machine; use at most "
            f"{most} here, or run more ranks across machines (torchrun)"
        )
    return nprocs


class Launch:
    """A distributed job that a `Dashboard` can drive like a `Trainer` (both are a `workbench.train.Job`):
    ``Dashboard(Launch(fn, 2))``.

    Arguments as for `launch`; `config` also gives the dashboard its initial lr/clip fields.
    `fit` runs the job (blocking) and returns rank 0's return value.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        nprocs: int,
        *,
        args: tuple[Any, ...] | list[Any] = (),
        strategy: DistributedStrategy | None = None,
        model: torch.nn.Module | None = None,
        config: TrainConfig | None = None,
        callbacks: Iterable[Callback] = (),
        control: TrainControl | None = None,
        backend: str | None = None,
        threads_per_process: int | None = None,
        addr: str = "127.0.0.1",
        port: int | None = None,
        timeout_s: float = 1800,
        verbose: bool = True,
        start_method: str = "forkserver",
    ) -> None:
        if not callable(fn):
            raise ValueError(f"fn must be a function taking the strategy first, got {fn!r}")
        if isinstance(args, str | bytes) or not isinstance(args, tuple | list):
            raise ValueError(
                f"args must be a tuple or list of the arguments fn takes after the strategy, got "
                f"{type(args).__name__} {args!r}; for one argument write args=({args!r},)"
            )
        self.fn, self.args = fn, tuple(args)
        self.nprocs = check_nprocs(nprocs)
        self.backend = default_backend(nprocs) if backend is None else backend
        check_choice("backend", self.backend, BACKENDS)
        if self.backend == "nccl" and nprocs > torch.cuda.device_count():
            raise ValueError(
                f"nprocs={nprocs} but torch sees {torch.cuda.device_count()} GPU(s) and nccl needs one "
                f"per process; use nprocs ≤ {torch.cuda.device_count()}, or backend='gloo' for CPU processes"
            )
        self.threads = (
            max(1, usable_cores() // nprocs)
            if threads_per_process is None
            else check_int("threads_per_process", threads_per_process, minimum=1)
        )
        self.addr = _check_addr(addr)
        self.port = _check_port(addr, port)
        self.timeout_s = check_positive("timeout_s", timeout_s)
        if self.timeout_s > MAX_TIMEOUT_S:
            raise ValueError(
                f"timeout_s must be at most {MAX_TIMEOUT_S:,} s (a week), got {timeout_s!r}; a collective "
                "that waits longer than that is a hang to report, not a wait"
            )
        self.model = model
        self.config = config if config is not None else TrainConfig()
        if strategy is not None and not isinstance(strategy, DistributedStrategy):
            raise ValueError(
                f"strategy must be a distributed strategy (DataParallel(), FullyShardedDataParallel(), "
                f"PipelineParallel(), TensorParallel()), got {strategy!r}"
            )
        self.strategy = strategy
        if strategy is not None:  # before any process starts: split points, micro-batches, the plan...
            strategy.validate(model, self.config, world_size=self.nprocs)
        self.control = control if control is not None else TrainControl()
        self.events = CallbackList(callbacks)
        self.verbose = verbose
        check_choice("start_method", start_method, START_METHODS)
        self.start_method = start_method
        if start_method not in multiprocessing.get_all_start_methods():
            raise ValueError(
                f"start_method={start_method!r} is not available on this platform; use one of "
                f"{', '.join(multiprocessing.get_all_start_methods())}"
            )
        self.step = 0
        self.total_steps = 0
        self.pids: list[int] = []  # the workers of the current (or last) run
        self._terminate = threading.Event()

    def add_callback(self, callback: Callback) -> None:
        """Subscribe `callback` to the workers' events (a dashboard attaching itself)."""
        self.events.callbacks.append(callback)

    def terminate(self) -> None:
        """Stop every worker now, from any thread (no checkpoint); `fit` then raises KeyboardInterrupt.

        `control.stop()` is the graceful way (the workers finish their step and save); this is for when they
        do not get to a step boundary, e.g. an interrupt while a `Dashboard` runs the job in the background.
        """
        self._terminate.set()

    def worker_pids(self) -> dict[int, int]:
        """rank → pid of the workers of the current (or last) run (`Job`)."""
        return dict(enumerate(self.pids))

    def describe(self, port: int | None = None) -> str:
        """One line: world size, backend, devices and threads, rendezvous address."""
        if self.backend == "nccl":
            where = f"GPUs 0-{self.nprocs - 1}, one per process"
        else:
            where = f"CPU, {self.threads} thread{'s' if self.threads > 1 else ''} each"
            gpus = visible_gpus()
            if gpus:  # the default chose gloo: too few GPUs for one per process
                where += f"; {gpus} GPU(s) for {self.nprocs} processes, nccl needs one each"
        port = port if port is not None else self.port
        how = (
            f", {self.strategy.summary()}"
            if self.strategy is not None and not isinstance(self.strategy, DataParallel)
            else ""
        )
        return (
            f"{self.nprocs} processes ({self.backend}, {where}){how} on {self.addr}:{port or '(free port)'}"
        )

    def fit(self, resume: bool = False) -> Any:
        """Start the workers, stream their events until they end, return rank 0's return value."""
        if resume:
            raise ValueError(
                "Launch.fit(resume=True) is not supported: resuming is up to your function; call "
                "trainer.fit(resume=True) inside it"
            )
        if self.start_method == "fork":
            _refuse_initialised_cuda()
        self._terminate.clear()
        port = self.port if self.port is not None else free_port(self.addr)
        if self.verbose:
            print(f"launch: {self.describe(port)}", flush=True)
        with tempfile.TemporaryDirectory(prefix="workbench-launch-") as result_dir:
            spec = WorkerSpec(
                self.fn,
                self.args,
                self.strategy,
                self.nprocs,
                self.backend,
                self.addr,
                port,
                self.threads,
                self.timeout_s,
                Path(result_dir),
            )
            _Supervisor(self, spec).run()
            result = torch.load(Path(result_dir) / RESULT_FILE, weights_only=False)
        if self.model is not None:
            if result["state"] is None:
                raise RuntimeError(
                    "model= was given but rank 0 trained no model (nothing was wrapped by the strategy, "
                    "e.g. no Trainer(..., strategy=strategy) ran); its weights cannot be returned"
                )
            self.model.load_state_dict(result["state"])
        return result["value"]


class _Supervisor:
    """Starts the workers, relays events and control, and stops everyone on a failure or interrupt."""

    def __init__(self, job: Launch, spec: WorkerSpec) -> None:
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
            if self.job._terminate.is_set():
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
        getattr(self.job.events, hook)(event)

    def _forward_control(self) -> None:
        control, commands = self.job.control, self.commands
        if commands is None or self._stop_sent:
            return
        try:
            if control.stop_requested:
                commands.send(("stop",))
                self._stop_sent = True
                return
            if control.paused != self._paused:
                self._paused = control.paused
                commands.send(("pause",) if self._paused else ("resume",))
            changes = control.at_step_boundary(wait=0)
            if changes.lr is not None:
                commands.send(("lr", changes.lr))
            if changes.clip_norm is not None or changes.clip_value is not None:
                commands.send(("clipping", changes.clip_norm, changes.clip_value))
            if changes.profile_steps is not None:
                commands.send(("profile", changes.profile_steps))
        except (BrokenPipeError, OSError):  # rank 0 is gone; _watch reports why
            self.commands = None

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
        live = {rank: p for rank, p in enumerate(self.processes) if p.exitcode is None and p.pid is not None}
        for process in live.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, STACK_SIGNAL)
        if live:
            time.sleep(_STACK_WAIT_S)
        stacks = {}
        for rank in live:
            path = stack_file(self.spec.result_dir, rank)
            stacks[rank] = path.read_text().strip() if path.exists() else ""
        return stacks

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
        report = self.reports.get(first)
        if report is not None:
            message += f"\n\nrank {first} traceback:\n{report[2]}"
        return WorkerFailed(message, first)

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
        stacks = self.hung[rank]
        if stacks:
            message += f"\n\nrank {rank} was here (Python stacks, most recent call first):\n{stacks}"
        return WorkerFailed(message, rank)

    def _describe_exit(self, rank: int) -> str:
        code = self.processes[rank].exitcode or 0
        report = self.reports.get(rank)
        if report is not None:  # what it raised, even if it then died of a signal on the way out
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


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port on `addr` that is free right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind((addr, 0))
        return sock.getsockname()[1]


def _check_addr(addr: str) -> str:
    """`addr` if this machine can resolve it (the rendezvous binds or connects there)."""
    if not isinstance(addr, str) or not addr:
        raise ValueError(f"addr must be a host name or IP address, got {addr!r}; the default is 127.0.0.1")
    try:
        socket.getaddrinfo(addr, None)
    except (socket.gaierror, UnicodeError) as error:
        raise ValueError(
            f"addr={addr!r} does not resolve to an address on this machine ({error}); use 127.0.0.1 for "
            "processes on this machine, or the first machine's host name or IP address"
        ) from None
    return addr


def _check_port(addr: str, port: int | None) -> int | None:
    if port is None:
        return None
    check_int("port", port, minimum=1)
    if port > 65535:
        raise ValueError(f"port must be ≤ 65535, got {port}")
    with socket.socket() as sock:
        # as the rendezvous store binds: a port that only lingers in TIME_WAIT after a run is free to use
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((addr, port))
            sock.listen()
        except OSError as error:
            raise ValueError(
                f"port {port} on {addr} is in use ({error.strerror}); pick another or leave port=None "
                "for a free one"
            ) from None
    return port


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


def _refuse_initialised_cuda() -> None:
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "CUDA is already initialised in this process (something ran on the GPU: a .cuda() call, a "
            "tensor with device='cuda', torch.cuda.synchronize()...), and forked workers cannot use it. "
            "Fix: use the default start_method='forkserver', whose workers start clean"
        )
