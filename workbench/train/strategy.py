"""Where training runs: one device (`SingleDevice`) or several processes (`DataParallel`, i.e. DDP).

A strategy is the small protocol the `Trainer` talks to: the device, this process's rank and the world
size, wrapping the model, and the few collectives the loop needs (all-reduce, broadcast of control
requests, gathering objects). The loop is the same for every strategy; only the strategy knows about
``torch.distributed``.

    trainer = Trainer(model, loss_fn, splits, config)                          # one device
    trainer = Trainer(model, loss_fn, splits, config, strategy=DataParallel())  # inside launch/torchrun

Under ``torchrun`` build the strategy with `DataParallel.from_env()`; inside `workbench.train.launch` the
launcher hands each worker a ready `DataParallel` as the first argument of its function.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import math
import os
from typing import Any, Protocol

import torch
import torch.distributed as dist

from workbench._validate import check_choice, check_int
from workbench.train.control import Changes, TrainControl
from workbench.train.events import Callback

BACKENDS = ("gloo", "nccl")
# Variables torchrun (and `launch`) set for every worker.
_TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class Strategy(Protocol):
    """What the training loop needs from "where it runs"."""

    rank: int
    world_size: int
    device: torch.device
    callbacks: list[Callback]  # extra subscribers the strategy brings (a launcher's event stream)
    control: TrainControl | None  # requests from a launcher's dashboard (None: the trainer makes one)

    @property
    def is_main(self) -> bool: ...

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module: ...

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module: ...

    def no_sync(self, model: torch.nn.Module, active: bool) -> contextlib.AbstractContextManager: ...

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor: ...

    def gather_object(self, value: Any) -> list[Any]: ...

    def agree(self, changes: Changes, stop: bool) -> tuple[Changes, bool]: ...

    def describe(self) -> str: ...


class SingleDevice:
    """Train in this process on one device: ``"auto"`` (GPU if torch sees one), ``"cpu"`` or ``"cuda"``.

    Example:
        >>> strategy = SingleDevice("cpu")
        >>> strategy.rank, strategy.world_size, strategy.is_main, strategy.describe()
        (0, 1, True, '1 process on cpu')
    """

    rank = 0
    world_size = 1

    def __init__(self, device: str | torch.device = "auto") -> None:
        self.device = _resolve_device(device)
        self.callbacks: list[Callback] = []
        self.control: TrainControl | None = None

    @property
    def is_main(self) -> bool:
        return True

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def no_sync(self, model: torch.nn.Module, active: bool) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        check_choice("op", op, ("sum", "mean"))
        return tensor

    def gather_object(self, value: Any) -> list[Any]:
        return [value]

    def agree(self, changes: Changes, stop: bool) -> tuple[Changes, bool]:
        return changes, stop

    def describe(self) -> str:
        return f"1 process on {self.device}"


class DataParallel:
    """DistributedDataParallel over the current process group: gloo on CPU, nccl on GPUs.

    Each process trains a full copy of the model on its shard of every batch; DDP all-reduces (averages)
    the gradients during backward, so every copy takes the same optimizer step. The `Trainer` shards the
    data by ``rank``/``world_size``, reduces logged losses and evaluations over all ranks, and lets only
    rank 0 write checkpoints and the metrics log.

    Args:
        sync_control: broadcast rank 0's control requests (pause, stop, lr, clipping) to every rank at each
            step boundary (one tiny broadcast per step). `launch` turns it on so its dashboard can steer.

    Build it after the process group exists (`launch` does, or use `from_env` under torchrun).
    """

    def __init__(self, *, sync_control: bool = False) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "DataParallel needs a torch.distributed process group and none is initialised here: run "
                "the function through workbench.train.launch(fn, nprocs=N), or under torchrun with "
                "DataParallel.from_env()"
            )
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.backend = dist.get_backend()
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        if self.backend == "nccl":
            self.device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        self.sync_control = sync_control
        self.callbacks: list[Callback] = []
        self.control: TrainControl | None = None
        self.module: torch.nn.Module | None = None  # the last model wrapped (its weights are "the result")

    @classmethod
    def from_env(cls, backend: str | None = None, timeout_s: float = 1800) -> DataParallel:
        """Join the process group described by torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR…).

        Args:
            backend: ``"gloo"`` or ``"nccl"``; default nccl when CUDA is available, else gloo.
            timeout_s: how long collectives (and the rendezvous) wait for the other ranks.

        Example (in a script started with ``torchrun --nproc-per-node 2 script.py``)::

            strategy = DataParallel.from_env()
            Trainer(model, loss_fn, splits, config, strategy=strategy).fit()
            strategy.close()
        """
        missing = [name for name in _TORCHRUN_VARIABLES if name not in os.environ]
        if missing:
            raise RuntimeError(
                f"DataParallel.from_env needs torchrun's variables; {', '.join(missing)} not set. Start the "
                "script with `torchrun --nproc-per-node N script.py` (or use launch() in a notebook)"
            )
        backend = default_backend() if backend is None else backend
        check_choice("backend", backend, BACKENDS)
        if not dist.is_initialized():
            if backend == "nccl":
                torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
        return cls()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """DDP around `model` (already on `device`); parameters are broadcast from rank 0."""
        self.module = model
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        # gradients live in the all-reduce buckets (no copy in and out of them each step)
        return torch.nn.parallel.DistributedDataParallel(
            model, device_ids=device_ids, gradient_as_bucket_view=True
        )

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model

    def no_sync(self, model: torch.nn.Module, active: bool) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce (for all but the last micro-batch of an accumulated step)."""
        if active and isinstance(model, torch.nn.parallel.DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Sum (or average) `tensor` over all ranks, in place; returns it."""
        check_choice("op", op, ("sum", "mean"))
        dist.all_reduce(tensor, dist.ReduceOp.SUM)
        if op == "mean":
            tensor /= self.world_size
        return tensor

    def gather_object(self, value: Any) -> list[Any]:
        """Every rank's `value` (picklable), in rank order, on every rank."""
        values: list[Any] = [None] * self.world_size
        dist.all_gather_object(values, value)
        return values

    def agree(self, changes: Changes, stop: bool) -> tuple[Changes, bool]:
        """Rank 0's requests, the same on every rank (when `sync_control`); others' are ignored."""
        if not self.sync_control:
            return changes, stop
        values = [stop, changes.lr, changes.clip_norm, changes.clip_value]
        message = torch.tensor([math.nan if v is None else float(v) for v in values], dtype=torch.float64)
        message = message.to(self.device)
        dist.broadcast(message, src=0)
        stop_flag, lr, clip_norm, clip_value = (None if math.isnan(v) else v for v in message.tolist())
        return Changes(lr=lr, clip_norm=clip_norm, clip_value=clip_value), bool(stop_flag)

    def barrier(self) -> None:
        """Wait until every rank gets here."""
        dist.barrier()

    def describe(self) -> str:
        where = f"{self.device.type}" if self.device.type == "cpu" else "one GPU each"
        count = torch.get_num_threads()
        threads = f", {count} thread{'s' if count > 1 else ''} each" if self.device.type == "cpu" else ""
        return f"{self.world_size} processes ({self.backend}, {where}{threads})"

    def close(self) -> None:
        """Leave the process group (call once at the end of a torchrun script, on every rank)."""
        if dist.is_initialized():
            leave_process_group(wait_for_others=True)


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


def per_rank_batch_size(global_batch_size: int, world_size: int) -> int:
    """The batch each rank takes so that together they make `global_batch_size`; it must divide exactly.

    Example:
        >>> per_rank_batch_size(256, 4)
        64
    """
    check_int("global_batch_size", global_batch_size, minimum=1)
    check_int("world_size", world_size, minimum=1)
    if global_batch_size % world_size:
        lower = global_batch_size // world_size * world_size
        raise ValueError(
            f"global_batch_size={global_batch_size} does not divide among {world_size} ranks; use a "
            f"multiple of {world_size} (e.g. {lower or world_size} or {lower + world_size})"
        )
    return global_batch_size // world_size


def default_backend() -> str:
    """nccl where torch sees a GPU, else gloo."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def _resolve_device(name: str | torch.device) -> torch.device:
    if isinstance(name, torch.device):
        return name
    check_choice("device", name, ("auto", "cpu", "cuda"))
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device here; use device='auto' or 'cpu'")
    return torch.device(name)
