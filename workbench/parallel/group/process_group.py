"""Joining and leaving the ``torch.distributed`` process group, and reading torchrun's variables."""

from __future__ import annotations

import datetime
import gc
import os
import re
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from workbench._validate import check_choice
from workbench.parallel.group.launch_env import TORCHRUN_VARIABLES, detect_launch_env
from workbench.parallel.group.network import gloo_interface_env

BACKENDS = ("gloo", "nccl")


def join_process_group_from_env(
    backend: str | None = None, timeout_s: float = 1800, who: str = "", share_cores: bool = True
) -> None:
    """Initialise the process group from the launcher's variables, once: torchrun's (RANK, WORLD_SIZE,
    MASTER_ADDR…; also TorchDistributor's), Open MPI's or MPICH's ``mpirun``, or Slurm's ``srun``
    (`workbench.parallel.group.launch_env`; torchrun's variables are set from the others').

    Before joining, the ranks tell each other their machine through torchrun's store, so that processes
    sharing a machine get distinct local ranks and GPUs even when separate torchrun agents started them
    (each agent numbers its own from LOCAL_RANK=0): LOCAL_RANK and LOCAL_WORLD_SIZE are set to this
    machine's numbering. See `place` for the backend and GPU each process gets.

    Where OMP_NUM_THREADS is unset (torchrun sets it; srun and mpirun do not) and `share_cores`, each of the
    processes on a machine takes at most an equal share of its cores as torch threads (`threads_per_rank`).

    `backend`: ``"gloo"``, ``"nccl"`` or None (the choice of `place`); `who` names the caller in the error
    raised outside any launcher; `share_cores`: False where the caller chose the threads itself.

    Example (a script's start under ``torchrun --nproc-per-node 2 script.py``; `DataParallel.from_env()`
    does it for you; run alone, it says how to start it):
        >>> join_process_group_from_env()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        RuntimeError: join_process_group_from_env needs a launcher's variables and none are set: ...
    """
    launcher = detect_launch_env()
    if launcher is None:
        raise RuntimeError(
            f"{who or 'join_process_group_from_env'} needs a launcher's variables and none are set: not "
            f"torchrun's ({', '.join(TORCHRUN_VARIABLES)}), Open MPI's (OMPI_COMM_WORLD_RANK…), MPICH's "
            "(PMI_RANK…) nor Slurm srun's (SLURM_PROCID…). Start the script with `torchrun "
            "--nproc-per-node N script.py`, `mpirun -np N python script.py` or `srun -n N python "
            "script.py` (or use launch() in a notebook)"
        )
    os.environ.update(launcher.variables())
    interface = gloo_interface_env(launcher.master_addr, os.environ)
    if interface and launcher.rank == 0:
        print(
            f"workbench: note: this machine's name {socket.gethostname()!r} resolves to loopback, where gloo "
            f"would listen; it uses {interface['GLOO_SOCKET_IFNAME']}, the interface that reaches "
            f"{launcher.master_addr} (set GLOO_SOCKET_IFNAME to choose another)",
            file=sys.stderr,
            flush=True,
        )
    os.environ.update(interface)
    if backend is not None:
        check_choice("backend", backend, BACKENDS)
    if dist.is_initialized():
        return
    timeout = datetime.timedelta(seconds=timeout_s)
    store, rank, world_size = next(dist.rendezvous("env://", timeout=timeout))  # as init_process_group does
    store.set_timeout(timeout)
    placement = place(backend, visible_gpus(), ranks_on_this_machine(store, rank, world_size), rank)
    os.environ.update(LOCAL_RANK=str(placement.local_rank), LOCAL_WORLD_SIZE=str(placement.local_world_size))
    if placement.note and placement.local_rank == 0:
        print(f"workbench: note: {placement.note}", file=sys.stderr, flush=True)
    if share_cores and "OMP_NUM_THREADS" not in os.environ:
        cpus = os.cpu_count() or 1
        torch.set_num_threads(threads_per_rank(torch.get_num_threads(), cpus, placement.local_world_size))
    if placement.backend == "nccl":
        torch.cuda.set_device(placement.local_rank)
    dist.init_process_group(placement.backend, store=store, rank=rank, world_size=world_size, timeout=timeout)


@dataclass(frozen=True)
class Placement:
    """What a process of a distributed job uses on its machine."""

    backend: str
    local_rank: int  # its index among the job's processes on this machine (its GPU under nccl)
    local_world_size: int  # the job's processes on this machine
    note: str | None = None  # said once per machine when the choice is not the obvious one


def place(requested: str | None, gpus: int, ranks_here: list[int], rank: int) -> Placement:
    """The backend and local rank of `rank`, one of `ranks_here` (the job's ranks on its machine), which
    has `gpus` GPUs: nccl with a GPU each where there are enough (nccl cannot share one between processes),
    else gloo on CPU with a note; nccl asked for without enough GPUs is refused.

    Example (the logic only; two torchrun agents on one machine with 2 GPUs, then with 1):
        >>> place(None, gpus=2, ranks_here=[0, 1], rank=1)
        Placement(backend='nccl', local_rank=1, local_world_size=2, note=None)
        >>> place(None, gpus=1, ranks_here=[0, 1], rank=1).backend
        'gloo'
    """
    processes, local_rank = len(ranks_here), ranks_here.index(rank)
    enough = 0 < processes <= gpus
    if requested == "nccl" and not enough:
        raise ValueError(
            f"backend='nccl' needs a GPU for each of the {processes} processes of this job on this machine "
            f"({socket.gethostname()}), and torch sees {gpus}. Fix: start fewer processes per machine, give "
            "the machine's GPUs to this job (CUDA_VISIBLE_DEVICES), or use the gloo backend (--backend gloo)"
        )
    if requested == "gloo" or not enough:
        note = None
        if requested is None and gpus > 0:
            note = (
                f"{processes} processes of this job share {gpus} GPU(s) on this machine and nccl needs one "
                "each: they use gloo on CPU (start at most one process per GPU to train on the GPUs)"
            )
        return Placement("gloo", local_rank, processes, note)
    return Placement("nccl", local_rank, processes)


def threads_per_rank(torch_threads: int, cpus: int, ranks_here: int) -> int:
    """Torch threads for one of `ranks_here` processes sharing a machine's `cpus`, where neither
    OMP_NUM_THREADS nor the user chose: torch's own count (the cores this process may run on, fewer where
    the launcher binds each process to its cores), at most an equal share of the machine. srun without CPU
    binding, or mpirun binding to a socket, leaves every rank all the cores: on 2 cores, 2 ranks of 2
    threads trained 4x slower than 2 of 1.

    Example (2 ranks, unbound, on 2 cores; then bound to one core each; then 4 ranks of 16 on 64):
        >>> threads_per_rank(2, cpus=2, ranks_here=2), threads_per_rank(1, 2, 2), threads_per_rank(64, 64, 4)
        (1, 1, 16)
    """
    return max(1, min(torch_threads, cpus // max(ranks_here, 1)))


def ranks_on_this_machine(store: dist.Store, rank: int, world_size: int) -> list[int]:
    """The ranks of the job that run on this machine, in order (every rank calls it: it waits for all)."""
    hosts = dist.PrefixStore("workbench/machine/", store)
    hosts.set(str(rank), machine_id())
    keys = [str(r) for r in range(world_size)]
    hosts.wait(keys)
    here = machine_id()
    return [r for r, key in zip(range(world_size), keys, strict=True) if hosts.get(key).decode() == here]


def machine_id() -> str:
    """This machine: its host name and, where Linux has one, its boot id (containers may share a name)."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    return f"{socket.gethostname()}/{boot.read_text().strip() if boot.exists() else ''}"


def leave_process_group(wait_for_others: bool) -> None:
    """Destroy the process group while the interpreter is fully alive (gloo's threads may still hold
    tensors of a DDP model that a reference cycle keeps; freed at interpreter exit, they abort the process).

    `wait_for_others`: a barrier first, so no rank tears its connections down while another still talks.

    Example (a process group of one; leaving when there is none does nothing):
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> leave_process_group(wait_for_others=True)
        >>> dist.is_initialized()
        False
        >>> leave_process_group(wait_for_others=True)
    """
    if not dist.is_initialized():
        return
    if wait_for_others:
        dist.barrier()
    gc.collect()  # DDP modules (and their reducer's references to the group) that only a cycle keeps
    dist.destroy_process_group()


_LOST_PEER = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|Timed out waiting|timed out|"
    r"NCCL communicator was aborted|Socket Timeout",
    re.IGNORECASE,
)


def lost_peer(error: BaseException) -> str | None:
    """What `error` says was lost when a collective failed because another rank went away or stopped
    answering (``"the connection to 10.0.0.2"``, or ``"the other ranks"`` when it names no address), or None
    for any other error.

    Example:
        >>> lost_peer(RuntimeError("[gloo/tcp/pair.cc:553] Connection closed by peer [10.77.0.2]:5322"))
        'the connection to 10.77.0.2'
        >>> lost_peer(RuntimeError("my data loader timed out")) is None  # not from gloo or NCCL
        True
    """
    text = str(error)
    from_the_backend = any(name in text for name in ("gloo", "NCCL", "c10d"))  # not the user's own errors
    if not isinstance(error, RuntimeError) or not from_the_backend or not _LOST_PEER.search(text):
        return None
    address = re.search(r"\[([0-9A-Fa-f.:]+)\]:\d+", text)
    return f"the connection to {address.group(1)}" if address else "the other ranks"


def under_a_launcher() -> bool:
    """True in a process started by torchrun, TorchDistributor, mpirun or srun (see `detect_launch_env`;
    ValueError when a launcher's variables are there but cannot place the process).

    Example (a script that runs alone or under a launcher; here, alone):
        >>> under_a_launcher()
        False
    """
    return detect_launch_env() is not None


def default_backend(processes: int = 1) -> str:
    """nccl where torch sees a GPU for each of `processes` on this machine (nccl needs one per process),
    else gloo: `place`'s rule for a job whose processes all run here.

    Example:
        >>> default_backend(processes=torch.cuda.device_count() + 1)
        'gloo'
    """
    return place(None, visible_gpus(), list(range(processes)), 0).backend


def visible_gpus() -> int:
    """The GPUs torch sees here (0 without CUDA); asks the driver without creating a CUDA context."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
