"""The worker side of `workbench.parallel.launch`: one forked process per rank.

A worker joins the process group, runs the user's function with its strategy bound to it, streams the
trainer's events to the launcher through a pipe, obeys the dashboard's control requests (rank 0 reads
them; the strategy broadcasts them to the other ranks), and hands its result back through a file. Trainers
that the function builds get the event pipe and the control through `workbench.train.supervision`.
"""

from __future__ import annotations

import ctypes
import datetime
import multiprocessing
import os
import signal
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from workbench.parallel.data_parallel import DataParallel
from workbench.parallel.distributed import DistributedStrategy
from workbench.parallel.process_group import leave_process_group
from workbench.train.control import TrainControl
from workbench.train.events import Callback, Event
from workbench.train.supervision import Supervision, supervised

RESULT_FILE = "rank0-result.pt"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


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


def run_worker(
    rank: int,
    spec: WorkerSpec,
    events: Connection,
    commands: Connection | None,
    inherited: Sequence[Connection],
) -> None:
    """Entry point of a forked worker (a `multiprocessing.Process` target)."""
    _die_with_parent()
    # A daemonic process may not start children, but a DataLoader with num_workers > 0 starts some. This
    # worker already dies with its parent (above), which is what daemon=True was for; its loader workers
    # watch it and exit when it does.
    multiprocessing.current_process()._config["daemon"] = False
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides when workers stop
    for connection in inherited:  # other workers' pipe ends: close them so the launcher sees EOFs
        connection.close()
    try:
        value, state = _run(rank, spec, events, commands)
        if rank == 0:
            torch.save({"value": value, "state": state}, spec.result_dir / RESULT_FILE)
        leave_process_group(wait_for_others=True)
        events.send(("done", rank))
    except BaseException as error:  # reported to the launcher, which names the rank
        events.send(("error", rank, type(error).__name__, str(error), traceback.format_exc()))
        leave_process_group(wait_for_others=False)
        raise SystemExit(1) from None


def _run(
    rank: int, spec: WorkerSpec, events: Connection, commands: Connection | None
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
    with supervised(Supervision(callbacks=(PipeEvents(events),), control=control)):
        value = spec.fn(strategy, *spec.args)
    return value, strategy.result_state()  # every rank takes part: shards and stages are gathered


def _obey(commands: Connection, control: TrainControl) -> None:
    """Apply the launcher's requests to rank 0's control until the pipe closes."""
    while True:
        try:
            name, *values = commands.recv()
        except (EOFError, OSError):
            return
        if name == "pause":
            control.pause()
        elif name == "resume":
            control.resume()
        elif name == "stop":
            control.stop()
        elif name == "lr":
            control.set_lr(values[0])
        elif name == "clipping":
            control.set_clipping(norm=values[0], value=values[1])


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker if the launching process dies (no orphans after a crash)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the launcher's cleanup is the only guard
        pass
