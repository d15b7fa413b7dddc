"""Run a training function on N processes from a notebook cell: ``launch(fn, nprocs=2)``.

Workers start from a fork server by default: a clean process that has imported torch but never run it, so a
worker is safe whatever this process did before (torch ops on several threads, whose OpenMP pool a plain
fork inherits and hangs on; CUDA already in use). The function, its arguments and the strategy reach the
workers through cloudpickle, so functions and classes defined in the notebook work. Tensors and NumPy
arrays of 1 MiB or more (your dataset) are written once to shared memory and mapped copy-on-write by every
worker, so they cost one copy whatever the number of ranks and still behave as each worker's own
(`shared_arrays`); a module's parameters and buffers are copied, each rank trains its
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

import inspect
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from workbench._validate import check_choice, check_int, check_positive
from workbench.parallel.group.process_group import BACKENDS, default_backend, visible_gpus
from workbench.parallel.launching._worker import RESULT_FILE, WorkerSpec
from workbench.parallel.launching.supervisor import Supervisor
from workbench.parallel.strategies.data_parallel import DataParallel
from workbench.parallel.strategies.distributed import DistributedStrategy
from workbench.train.arguments import check_callbacks
from workbench.train.config import TrainConfig
from workbench.train.control import TrainControl
from workbench.train.events import Callback, CallbackList
from workbench.train.interrupts import TrainingInterrupted, again, interrupted_line, stop_on_interrupt
from workbench.train.job_runner import GRACE_S
from workbench.train.progress import ConsoleProgress

START_METHODS = ("forkserver", "spawn", "fork")
MAX_TIMEOUT_S = 7 * 24 * 3600
MAX_PROCESSES_PER_CORE = 4


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
        progress: a text progress bar of rank 0's steps with loss, lr and the last evaluation, one line on
            stdout that updates (in a notebook cell and a terminal alike); default: as `verbose`. A
            `Dashboard` shows more.
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
        options["callbacks"] = [*options.get("callbacks", ()), ConsoleProgress(sys.stdout, one_line=True)]
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

    Example (in a notebook, ``Dashboard(job)`` runs it in the background instead, with its controls):
        >>> def world(strategy):
        ...     return strategy.world_size
        >>> job = Launch(world, 2, verbose=False)
        >>> job.fit()
        2
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
        _check_takes(fn, tuple(args))
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
        self._given_config = config  # given: the workers' Trainers train with it (one config for all)
        if strategy is not None and not isinstance(strategy, DistributedStrategy):
            raise ValueError(
                f"strategy must be a distributed strategy (DataParallel(), FullyShardedDataParallel(), "
                f"PipelineParallel(), TensorParallel()), got {strategy!r}"
            )
        self.strategy = strategy
        if strategy is not None:  # before any process starts: split points, micro-batches, the plan...
            strategy.validate(model, self.config, world_size=self.nprocs)
        self.control = control if control is not None else TrainControl()
        if isinstance(callbacks, Iterable) and not isinstance(callbacks, str | bytes):
            callbacks = list(callbacks)  # a generator: read once, by the check and by the events
        check_callbacks(callbacks)  # a Lightning callback, say: refused here, not at the first event
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
        self.checkpoint: str | None = None  # rank 0's last checkpoint, from its fit-end event
        self.pids: list[int] = []  # the workers of the current (or last) run
        self._terminate = threading.Event()
        self._interrupted_at: float | None = None  # a blocking fit's first interrupt (stop_on_interrupt)

    def add_callback(self, callback: Callback) -> None:
        """Subscribe `callback` to the workers' events (a dashboard attaching itself)."""
        self.events.callbacks.append(callback)

    def terminate(self) -> None:
        """Stop every worker now, from any thread (no checkpoint); `fit` then raises KeyboardInterrupt.

        `control.stop()` is the graceful way (the workers finish their step and save); this is for when they
        do not get to a step boundary, e.g. an interrupt while a `Dashboard` runs the job in the background.
        """
        self._terminate.set()

    def terminating(self) -> bool:
        """Whether `terminate` was called during this `fit`, or an interrupt found no step boundary within
        `GRACE_S` (the supervisor polls it)."""
        late = self._interrupted_at is not None and time.monotonic() - self._interrupted_at > GRACE_S
        return self._terminate.is_set() or late

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
        self._interrupted_at, self.checkpoint = None, None
        port = self.port if self.port is not None else free_port(self.addr)
        if self.verbose:
            print(f"launch: {self.describe(port)}", flush=True)
        with stop_on_interrupt(self.control, on_first=self._note_interrupt) as pressed:
            try:
                result = self._run_workers(port)
            except KeyboardInterrupt:
                if not pressed:
                    raise
                raise self._interrupted(pressed[0], saved=False) from None
        if pressed:  # the workers stopped together at a step boundary and saved
            raise self._interrupted(pressed[0], saved=True, result=result["value"])
        return self._take(result)

    def _note_interrupt(self, by: signal.Signals) -> None:
        self._interrupted_at = time.monotonic()
        print(
            f"launch: stopping every worker after this step ({again(by)}, or {GRACE_S:g} s without a step "
            "boundary: stop them at once)",
            flush=True,
        )

    def _interrupted(self, by: signal.Signals, saved: bool, result: Any = None) -> TrainingInterrupted:
        line = interrupted_line(self, saved, by) + ("" if saved else "; every worker was stopped")
        return TrainingInterrupted.of(self, line, result, by)

    def _run_workers(self, port: int) -> dict[str, Any]:
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
                self._given_config,
            )
            Supervisor(self, spec).run()
            return torch.load(Path(result_dir) / RESULT_FILE, weights_only=False)

    def _take(self, result: dict[str, Any]) -> Any:
        """Rank 0's return value; its trained weights loaded into `model` (when given)."""
        if self.model is not None:
            if result["state"] is None:
                raise RuntimeError(
                    "model= was given but rank 0 trained no model (nothing was wrapped by the strategy, "
                    "e.g. no Trainer(..., strategy=strategy) ran); its weights cannot be returned"
                )
            self.model.load_state_dict(result["state"])
        return result["value"]


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port on `addr` that is free right now (the OS picks it).

    Example:
        >>> 1024 <= free_port() <= 65535
        True
    """
    with socket.socket() as sock:
        sock.bind((addr, 0))
        return sock.getsockname()[1]


def _check_takes(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """ValueError, before any process starts, when ``fn(strategy, *args)`` would not bind on every rank."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: called as it is
        return
    try:
        signature.bind(None, *args)
    except TypeError as mismatch:
        name = getattr(fn, "__name__", type(fn).__name__)
        fix = (
            "give the arguments after the strategy as args=(...)"
            if "missing" in str(mismatch)
            else "write fn to take the strategy first, "
            + ("lambda strategy: ..." if name == "<lambda>" else f"def {name}(strategy, ...)")
        )
        raise ValueError(
            f"every rank calls fn(strategy, *args) with {len(args)} argument(s) in args, but "
            f"{name}{signature} does not take that ({mismatch}); {fix}"
        ) from None


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


def _refuse_initialised_cuda() -> None:
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "CUDA is already initialised in this process (something ran on the GPU: a .cuda() call, a "
            "tensor with device='cuda', torch.cuda.synchronize()...), and forked workers cannot use it. "
            "Fix: use the default start_method='forkserver', whose workers start clean"
        )
