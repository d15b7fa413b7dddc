"""The worker side of `workbench.parallel.launch`: one process per rank.

Workers start from a fork server (a clean process that imported torch but never ran it: no OpenMP thread
pool, no CUDA context to inherit), so they are safe whatever the notebook did before. What they run travels
as a `Payload`: the user's function, arguments and strategy pickled with cloudpickle (notebook-defined
functions and classes by value; large tensors and arrays as shared-memory files each worker maps
copy-on-write, `shared_arrays`), plus the launcher's working directory, environment and import path.

A worker joins the process group, runs the user's function with its strategy bound to it, streams the
trainer's events to the launcher through a pipe, obeys the dashboard's control requests (rank 0 reads
them; the strategy broadcasts them to the other ranks), and hands its result back through a file. Trainers
that the function builds get the event pipe and the control through `workbench.train.supervision`.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import faulthandler
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import reduction
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import cloudpickle
import psutil
import torch
import torch.distributed as dist

from workbench.parallel.group.process_group import leave_process_group
from workbench.parallel.launching.shared_arrays import SharedArrays, loads_sharing, pickle_sharing
from workbench.parallel.launching.tracebacks import rank_traceback
from workbench.parallel.strategies.data_parallel import DataParallel
from workbench.parallel.strategies.distributed import DistributedStrategy
from workbench.train.config import TrainConfig
from workbench.train.control import ControlMessage, TrainControl
from workbench.train.events import Callback, Event
from workbench.train.supervision import Supervision, supervised

RESULT_FILE = "rank0-result.pt"
STACK_SIGNAL = signal.SIGUSR1  # asks a worker for its Python stacks (faulthandler), e.g. when it hangs


def stack_file(result_dir: Path, rank: int) -> Path:
    """Where rank `rank` writes its Python stacks on `STACK_SIGNAL`."""
    return result_dir / f"rank{rank}-stacks.txt"


def python_stacks(pids: dict[int, int], result_dir: Path, wait_s: float) -> dict[int, str]:
    """Rank → the Python stacks of its worker now: each is sent `STACK_SIGNAL` and what it appends to its
    stack file within `wait_s` is read (the file keeps earlier dumps; the worker writes at its own offset)."""
    if not pids:
        return {}
    before = {rank: _size(stack_file(result_dir, rank)) for rank in pids}
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, STACK_SIGNAL)
    time.sleep(wait_s)
    stacks = {}
    for rank in pids:
        path = stack_file(result_dir, rank)
        dumped = path.read_bytes()[before[rank] :] if path.exists() else b""
        stacks[rank] = dumped.decode(errors="replace").strip()
    return stacks


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True)
class Payload:
    """What a worker needs before it can unpickle the spec: where the launcher stood, then the spec."""

    cwd: str
    environ: dict[str, str]
    sys_path: list[str]
    spec: bytes  # a cloudpickled WorkerSpec
    launcher_pid: int = 0  # the workers outlive it only by a moment (see `watch_launcher`)
    shared_folder: str = ""  # its shared arrays, which the last worker removes if it was killed

    @classmethod
    def of(cls, spec: WorkerSpec, shared: SharedArrays) -> Payload:
        """The launcher's cwd, environment and sys.path now, and `spec` pickled (user code by value, large
        tensors and arrays as files of `shared`)."""
        pickled = dumps_by_value(spec, spec.fn, shared)
        return cls(os.getcwd(), dict(os.environ), list(sys.path), pickled, os.getpid(), str(shared.folder))

    def open(self) -> WorkerSpec:
        """Stand where the launcher stood and unpickle the spec (in the worker)."""
        os.chdir(self.cwd)
        os.environ.clear()
        os.environ.update(self.environ)
        sys.path[:] = self.sys_path
        if "fork" in multiprocessing.get_all_start_methods():
            # multiprocessing made the fork server's method this process's default; what the user's code
            # starts here (DataLoader workers) gets the platform's usual fork again, which passes it the
            # dataset as it is (classes pickled by value could not be pickled a second time)
            multiprocessing.set_start_method("fork", force=True)
        return loads_sharing(self.spec)


def dumps_by_value(value: Any, fn: Callable[..., Any], shared: SharedArrays | None = None) -> bytes:
    """`value` cloudpickled, with the module that defines `fn` pickled by value when it is user code (a
    script, a test file, a notebook's ``__main__``): a worker may not be able to import it by name. With
    `shared`, its large tensors and arrays go to shared-memory files instead (see `shared_arrays`)."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    by_value = module is not None and module.__name__ != "__main__" and _is_user_code(module)
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        return pickle_sharing(value, shared)
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)


def _is_user_code(module: types.ModuleType) -> bool:
    """Neither an installed package nor the standard library nor workbench itself."""
    name = module.__name__.split(".")[0]
    if name in sys.stdlib_module_names or name == "workbench":
        return False
    path = getattr(module, "__file__", None) or ""
    return "site-packages" not in path and "dist-packages" not in path


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker of one launch shares."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    strategy: DistributedStrategy | None  # None: DataParallel
    world_size: int
    backend: str
    addr: str
    port: int
    threads: int
    timeout_s: float
    result_dir: Path
    config: TrainConfig | None = None  # Launch(config=...): the config of every Trainer the workers build


class PipeEvents(Callback):
    """Sends each trainer event to the launcher as ``("event", hook, event)``."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def on_fit_start(self, info: Event) -> None:
        self.connection.send(("event", "on_fit_start", info))

    def on_step(self, metrics: Event) -> None:
        self.connection.send(("event", "on_step", metrics))

    def on_eval(self, metrics: Event) -> None:
        self.connection.send(("event", "on_eval", metrics))

    def on_fit_end(self, summary: Event) -> None:
        self.connection.send(("event", "on_fit_end", summary))


class LauncherOutput:
    """The launcher's stdout and stderr file descriptors, handed to a worker as they are at launch time.

    A fork server's children inherit the descriptors the server had when it started, not the launcher's
    current ones (a redirected or captured output); pickled for a child, each descriptor is duplicated into
    it (`multiprocessing.reduction.DupFd`). A forked child already shares them.
    """

    def __init__(self) -> None:
        self.fds = (sys.stdout.fileno(), sys.stderr.fileno()) if _has_fds() else None

    def __reduce__(self) -> tuple[Any, ...]:
        if self.fds is None:
            return (_no_output, ())
        return (_duplicated, tuple(reduction.DupFd(fd) for fd in self.fds))

    def use(self) -> None:
        """In the worker: write to the launcher's outputs (nothing to do after a fork)."""


class _Duplicated(LauncherOutput):
    def __init__(self, fds: tuple[int, int] | None) -> None:
        self.fds = fds

    def use(self) -> None:
        if self.fds is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, target in zip(self.fds, (1, 2), strict=True):
            os.dup2(fd, target)
            os.close(fd)


def _duplicated(*fds: Any) -> _Duplicated:
    return _Duplicated(tuple(fd.detach() for fd in fds))


def _no_output() -> _Duplicated:
    return _Duplicated(None)


def _has_fds() -> bool:
    try:
        sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # e.g. a notebook's stream objects: no descriptors
        return False
    return True


def run_worker(
    rank: int,
    payload: Payload,
    output: LauncherOutput,
    events: Connection,
    commands: Connection | None,
    inherited: Sequence[Connection],
    cells: Connection | None = None,
) -> None:
    """Entry point of a worker (a `multiprocessing.Process` target). A rank of an interactive pool
    (`rank_pool`) gets `cells`, its two-way connection to the notebook, as its function's second argument."""
    output.use()
    _die_with_parent()
    watch_launcher(payload.launcher_pid, payload.shared_folder)
    # A daemonic process may not start children, but a DataLoader with num_workers > 0 starts some. This
    # worker already dies with its parent (above), which is what daemon=True was for; its loader workers
    # watch it and exit when it does.
    multiprocessing.current_process()._config["daemon"] = False
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides when workers stop
    for connection in inherited:  # other workers' pipe ends: close them so the launcher sees EOFs
        connection.close()
    try:
        spec = payload.open()
        stacks = stack_file(spec.result_dir, rank).open("w")  # kept open: the handler writes from C
        faulthandler.register(STACK_SIGNAL, file=stacks, all_threads=True)
        value, state = _run(rank, spec, events, commands, cells)
        if rank == 0:
            _save_result(value, state, spec.result_dir / RESULT_FILE)
        leave_process_group(wait_for_others=True)
        events.send(("done", rank))
    except BaseException as error:  # reported to the launcher, which names the rank
        events.send(("error", rank, type(error).__name__, str(error), rank_traceback(error)))
        leave_process_group(wait_for_others=False)
        raise SystemExit(1) from None


def _save_result(value: Any, state: dict[str, torch.Tensor] | None, path: Path) -> None:
    """Rank 0's return value (and the model state the strategy gathered) to `path`, for the launcher."""
    try:
        torch.save({"value": value, "state": state}, path)
    except Exception as error:  # pickle's refusal of what the function returned
        raise TypeError(
            f"rank 0's function returned a {type(value).__name__}, which cannot be sent back to the launcher "
            f"({type(error).__name__}: {error}); return tensors, numbers, strings, or lists and dicts of them"
        ) from None


def _run(
    rank: int, spec: WorkerSpec, events: Connection, commands: Connection | None, cells: Connection | None
) -> tuple[Any, dict[str, torch.Tensor] | None]:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(spec.world_size),
        LOCAL_WORLD_SIZE=str(spec.world_size),
        MASTER_ADDR=spec.addr,
        MASTER_PORT=str(spec.port),
    )
    torch.set_num_threads(spec.threads)
    if spec.backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        spec.backend,
        init_method=f"tcp://{spec.addr}:{spec.port}",
        rank=rank,
        world_size=spec.world_size,
        timeout=datetime.timedelta(seconds=spec.timeout_s),
    )
    strategy = spec.strategy if spec.strategy is not None else DataParallel()  # this worker's forked copy
    strategy.sync_control = True  # so the dashboard's requests reach every rank at the same step
    strategy.bind()
    control = None
    if commands is not None:
        control = TrainControl()
        threading.Thread(
            target=_obey, args=(commands, control), name="workbench-control", daemon=True
        ).start()
    with supervised(Supervision(callbacks=(PipeEvents(events),), control=control, config=spec.config)):
        value = spec.fn(strategy, *((cells,) if cells is not None else ()), *spec.args)
    return value, strategy.result_state()  # every rank takes part: shards and stages are gathered


def _obey(commands: Connection, control: TrainControl) -> None:
    """Apply the launcher's requests to rank 0's control until the pipe closes."""
    while True:
        try:
            encoded = commands.recv()
        except (EOFError, OSError):
            return
        ControlMessage.decode(encoded).apply_to(control)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker if the launching process dies (no orphans after a crash)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the launcher's cleanup is the only guard
        pass


def watch_launcher(pid: int, shared_folder: str, interval_s: float = 0.5) -> None:
    """Exit this worker within `interval_s` of the launcher's death, removing its shared arrays' folder.

    A worker dies with its parent (`_die_with_parent`), but a fork server's workers have the server as their
    parent, and the server may outlive a launcher killed with SIGKILL or SIGTERM, which can no longer stop
    them: they would train on to the end of their function and leave the folder in /dev/shm. A zombie (a
    dead launcher its own parent has not reaped yet) counts as gone.
    """
    if pid <= 0:
        return

    def watch() -> None:
        while _alive(pid):
            time.sleep(interval_s)
        if shared_folder:
            shutil.rmtree(shared_folder, ignore_errors=True)
        os._exit(1)

    threading.Thread(target=watch, name="workbench-launcher-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
