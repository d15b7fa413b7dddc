"""Joining and leaving the ``torch.distributed`` process group, and reading torchrun's variables."""

from __future__ import annotations

import datetime
import gc
import os

import torch
import torch.distributed as dist

from workbench._validate import check_choice

BACKENDS = ("gloo", "nccl")
# Variables torchrun (and `launch`) set for every worker.
_TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def join_process_group_from_env(backend: str | None = None, timeout_s: float = 1800, who: str = "") -> None:
    """Initialise the process group from torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR…), once.

    `backend`: ``"gloo"`` or ``"nccl"`` (default nccl where torch sees a GPU for each of this machine's
    processes, LOCAL_WORLD_SIZE; else gloo); `who` names the caller in
    the error raised outside torchrun.
    """
    missing = [name for name in _TORCHRUN_VARIABLES if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"{who or 'join_process_group_from_env'} needs torchrun's variables; {', '.join(missing)} not "
            "set. Start the script with `torchrun --nproc-per-node N script.py` (or use launch() in a "
            "notebook)"
        )
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    backend = default_backend(local_processes) if backend is None else backend
    check_choice("backend", backend, BACKENDS)
    if not dist.is_initialized():
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))


def leave_process_group(wait_for_others: bool) -> None:
    """Destroy the process group while the interpreter is fully alive (gloo's threads may still hold
    tensors of a DDP model that a reference cycle keeps; freed at interpreter exit, they abort the process).

    `wait_for_others`: a barrier first, so no rank tears its connections down while another still talks.
    """
    if not dist.is_initialized():
        return
    if wait_for_others:
        dist.barrier()
    gc.collect()  # DDP modules (and their reducer's references to the group) that only a cycle keeps
    dist.destroy_process_group()


def under_torchrun() -> bool:
    """True in a process started by torchrun (or anything that sets RANK, WORLD_SIZE, MASTER_ADDR…)."""
    return all(name in os.environ for name in _TORCHRUN_VARIABLES)


def default_backend(processes: int = 1) -> str:
    """nccl where torch sees a GPU for each of `processes` (nccl needs one per process), else gloo.

    Example:
        >>> default_backend(processes=torch.cuda.device_count() + 1)
        'gloo'
    """
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= processes else "gloo"
