"""Where training runs: one device (`SingleDevice`) or several processes (`DataParallel`, i.e. DDP; the
model-parallel strategies in `workbench.train.pipeline`, `.tensor_parallel` and `.fsdp` build on
`DistributedStrategy` here).

A strategy is the protocol the `Trainer` talks to: the device, this process's rank and the world size,
which shard of the data it trains on, wrapping the model, one step's forward and backward, the gradient
norm, whole-model state dicts, and the few collectives the loop needs (all-reduce, broadcast of control
requests, gathering objects). The loop is the same for every strategy; only the strategy knows about
``torch.distributed``.

    trainer = Trainer(model, loss_fn, splits, config)                          # one device
    trainer = Trainer(model, loss_fn, splits, config, strategy=DataParallel())  # inside launch/torchrun

Under ``torchrun`` build the strategy with `DataParallel.from_env()` (or any strategy's ``from_env``);
inside `workbench.train.launch` the launcher hands each worker its strategy, bound to the process group,
as the first argument of its function.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import math
import os
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.distributed as dist

from workbench._validate import check_choice, check_int
from workbench.train import gradients
from workbench.train.config import TrainConfig
from workbench.train.control import Changes, TrainControl
from workbench.train.events import Callback
from workbench.train.precision import Precision

BACKENDS = ("gloo", "nccl")
REDUCE_OPS = ("sum", "mean", "max")
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Batch = tuple[torch.Tensor, torch.Tensor]
# Variables torchrun (and `launch`) set for every worker.
_TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class Strategy(Protocol):
    """What the training loop needs from "where it runs".

    `StrategyBase` implements every method for one process; the distributed strategies override the parts
    they change. Only the strategy knows about ``torch.distributed``.
    """

    rank: int
    world_size: int
    device: torch.device
    callbacks: list[Callback]  # extra subscribers the strategy brings (a launcher's event stream)
    control: TrainControl | None  # requests from a launcher's dashboard (None: the trainer makes one)

    @property
    def is_main(self) -> bool: ...

    @property
    def data_rank(self) -> int: ...  # which shard of every batch this rank trains on

    @property
    def data_world_size(self) -> int: ...  # how many shards (1: every rank sees the same batch)

    @property
    def counts_loss(self) -> bool: ...  # this rank's loss is its own data's (else another rank reports it)

    def bind(self) -> None: ...

    def validate(
        self, model: torch.nn.Module, config: TrainConfig, world_size: int | None = None
    ) -> None: ...

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module: ...

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module: ...

    def forward_backward(
        self, model: torch.nn.Module, group: list[Batch], loss_fn: LossFn, precision: Precision, scaler: Any
    ) -> torch.Tensor | None: ...

    def predict(self, model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor | None: ...

    def forward_rounds(self, batches: int) -> int: ...

    def total_norm(self, grads: list[torch.Tensor]) -> torch.Tensor: ...

    def model_state(self, model: torch.nn.Module) -> dict[str, Any] | None: ...

    def load_model_state(self, model: torch.nn.Module, state: dict[str, Any]) -> None: ...

    def optimizer_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]: ...

    def load_optimizer_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None: ...

    def step_details(self) -> dict[str, Any]: ...

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor: ...

    def gather_object(self, value: Any) -> list[Any]: ...

    def agree(self, changes: Changes, stop: bool) -> tuple[Changes, bool]: ...

    def describe(self) -> str: ...


class StrategyBase:
    """One process's way of training, which the distributed strategies extend: a plain forward and
    backward per micro-batch, the model's own state dicts, torch's gradient norm."""

    rank = 0
    world_size = 1
    device: torch.device

    def __init__(self) -> None:
        self.callbacks: list[Callback] = []
        self.control: TrainControl | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def data_rank(self) -> int:
        return self.rank

    @property
    def data_world_size(self) -> int:
        return self.world_size

    @property
    def counts_loss(self) -> bool:
        return True

    def bind(self) -> None:
        """Join the process group, where there is one to join (nothing to do in one process)."""

    def validate(self, model: torch.nn.Module, config: TrainConfig, world_size: int | None = None) -> None:
        """Raise ValueError if `model` and `config` cannot train this way on `world_size` ranks."""

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` (or this rank's part of it) on `device`: the module to train, whose parameters the
        optimizer updates."""
        return model.to(self.device)

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module behind `wrap`'s result."""
        return model

    def no_sync(self, model: torch.nn.Module, active: bool) -> contextlib.AbstractContextManager:
        """A context in which backward skips the gradient synchronisation (while `active`)."""
        return contextlib.nullcontext()

    def forward_backward(
        self, model: torch.nn.Module, group: list[Batch], loss_fn: LossFn, precision: Precision, scaler: Any
    ) -> torch.Tensor | None:
        """Forward and backward over the micro-batches of one optimizer step; returns their mean loss
        (detached), or None on a rank that computes no loss. Gradients are synchronised once, on the last."""
        samples = sum(len(x) for x, _ in group)
        step_loss = None
        for index, (x, y) in enumerate(group):
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            with self.no_sync(model, index < len(group) - 1):
                with precision.autocast():
                    loss = loss_fn(model(x), y)
                if len(group) > 1:  # mean over the whole group, as one batch of all its samples would give
                    loss = loss * (len(x) / samples)
                (scaler.scale(loss) if scaler is not None else loss).backward()
            step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
        return step_loss

    def predict(self, model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor | None:
        """The model's output for `inputs` (evaluation), or None on a rank that has none."""
        return model(inputs)

    def forward_rounds(self, batches: int) -> int:
        """How many forward passes this rank makes in an evaluation of `batches` local batches (more when
        every rank must take part in every forward, e.g. FSDP gathering parameters)."""
        return batches

    def total_norm(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """The L2 norm of the whole model's gradient."""
        return gradients.total_norm(grads)

    def model_state(self, model: torch.nn.Module) -> dict[str, Any] | None:
        """The whole model's state dict on rank 0 (for checkpoints and results); every rank calls it."""
        return self.unwrap(model).state_dict()

    def load_model_state(self, model: torch.nn.Module, state: dict[str, Any]) -> None:
        """Load a whole-model state dict (as `model_state` gives) into this rank's part of the model."""
        self.unwrap(model).load_state_dict(state)

    def optimizer_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer's state dict for a checkpoint; every rank calls it."""
        return optimizer.state_dict()

    def load_optimizer_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        """Load what `optimizer_state` gave."""
        optimizer.load_state_dict(state)

    def step_details(self) -> dict[str, Any]:
        """Extra fields for the event of the last step (a pipeline's timeline)."""
        return {}

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Sum, average or maximum of `tensor` over all ranks, in place; returns it."""
        check_choice("op", op, REDUCE_OPS)
        return tensor

    def gather_object(self, value: Any) -> list[Any]:
        """Every rank's `value`, in rank order."""
        return [value]

    def agree(self, changes: Changes, stop: bool) -> tuple[Changes, bool]:
        """The control requests every rank acts on."""
        return changes, stop


class SingleDevice(StrategyBase):
    """Train in this process on one device: ``"auto"`` (GPU if torch sees one), ``"cpu"`` or ``"cuda"``.

    Example:
        >>> strategy = SingleDevice("cpu")
        >>> strategy.rank, strategy.world_size, strategy.is_main, strategy.describe()
        (0, 1, True, '1 process on cpu')
    """

    def __init__(self, device: str | torch.device = "auto") -> None:
        super().__init__()
        self.device = _resolve_device(device)

    def describe(self) -> str:
        return f"1 process on {self.device}"


class DistributedStrategy(StrategyBase):
    """A strategy over the current ``torch.distributed`` process group: gloo on CPU, nccl on GPUs.

    Build it anywhere (its options only); it joins the process group when bound: `launch` binds it in each
    worker, `from_env` under torchrun, and the `Trainer` when it starts. Subclasses say how the model is
    split or replicated.

    Args:
        sync_control: broadcast rank 0's control requests (pause, stop, lr, clipping) to every rank at each
            step boundary (one tiny broadcast per step). `launch` turns it on so its dashboard can steer.
    """

    name = "distributed"  # what `describe` calls the parallelism

    def __init__(self, *, sync_control: bool = False) -> None:
        super().__init__()
        self.sync_control = sync_control
        self.module: torch.nn.Module | None = None  # the last model wrapped (its weights are "the result")
        self.backend: str | None = None
        self.device = torch.device("cpu")
        self.local_rank = 0
        self._bound = False

    @classmethod
    def from_env(cls, backend: str | None = None, timeout_s: float = 1800, **options: Any) -> Any:
        """Join the process group described by torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR…).

        Args:
            backend: ``"gloo"`` or ``"nccl"``; default nccl when CUDA is available, else gloo.
            timeout_s: how long collectives (and the rendezvous) wait for the other ranks.
            **options: the strategy's own options (e.g. ``schedule="1f1b"`` for `PipelineParallel`).

        Example (in a script started with ``torchrun --nproc-per-node 2 script.py``)::

            strategy = DataParallel.from_env()
            Trainer(model, loss_fn, splits, config, strategy=strategy).fit()
            strategy.close()
        """
        join_process_group_from_env(backend, timeout_s, who=f"{cls.__name__}.from_env")
        strategy = cls(**options)
        strategy.bind()
        return strategy

    def bind(self) -> None:
        """Take rank, world size and device from the current process group (once)."""
        if self._bound:
            return
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                f"{type(self).__name__} needs a torch.distributed process group and none is initialised "
                "here: run the function through workbench.train.launch(fn, nprocs=N), or under torchrun "
                f"with {type(self).__name__}.from_env()"
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
        self._bound = True

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Sum, average or maximum of `tensor` over all ranks, in place; returns it."""
        check_choice("op", op, REDUCE_OPS)
        dist.all_reduce(tensor, dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
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

    def result_state(self) -> dict[str, torch.Tensor] | None:
        """The trained model's whole state dict, on CPU, on rank 0 (None elsewhere, or if nothing was
        wrapped). Every rank calls it: model-parallel strategies gather the parts."""
        if self.module is None:
            return None
        state = self.model_state(self.module)
        if not self.is_main or state is None:
            return None
        return {k: v.detach().cpu() for k, v in state.items()}

    def processes(self) -> str:
        """E.g. "2 processes (gloo, cpu, 1 thread each)"."""
        if not self._bound:
            return "not started (bound to a process group by launch, torchrun or the Trainer)"
        where = f"{self.device.type}" if self.device.type == "cpu" else "one GPU each"
        count = torch.get_num_threads()
        threads = f", {count} thread{'s' if count > 1 else ''} each" if self.device.type == "cpu" else ""
        return f"{self.world_size} processes ({self.backend}, {where}{threads})"

    def describe(self) -> str:
        return f"{self.processes()}, {self.summary()}"

    def summary(self) -> str:
        """The parallelism in a few words, e.g. "pipeline: 2 stages, 4 micro-batches, 1F1B"."""
        return self.name

    def close(self) -> None:
        """Leave the process group (call once at the end of a torchrun script, on every rank)."""
        if dist.is_initialized():
            leave_process_group(wait_for_others=True)


class DataParallel(DistributedStrategy):
    """DistributedDataParallel: every rank trains a full copy of the model on its shard of every batch.

    DDP all-reduces (averages) the gradients during backward, so every copy takes the same optimizer step.
    The `Trainer` shards the data by ``rank``/``world_size``, reduces logged losses and evaluations over
    all ranks, and lets only rank 0 write checkpoints and the metrics log.

    Args:
        sync_control: see `DistributedStrategy` (`launch` turns it on).
    """

    name = "data parallel"

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """DDP around `model`, moved to `device`; parameters are broadcast from rank 0."""
        self.module = model = model.to(self.device)
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

    def describe(self) -> str:
        return self.processes()


def join_process_group_from_env(backend: str | None = None, timeout_s: float = 1800, who: str = "") -> None:
    """Initialise the process group from torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR…), once.

    `backend`: ``"gloo"`` or ``"nccl"`` (default nccl where torch sees a GPU); `who` names the caller in
    the error raised outside torchrun.
    """
    missing = [name for name in _TORCHRUN_VARIABLES if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"{who or 'join_process_group_from_env'} needs torchrun's variables; {', '.join(missing)} not "
            "set. Start the script with `torchrun --nproc-per-node N script.py` (or use launch() in a "
            "notebook)"
        )
    backend = default_backend() if backend is None else backend
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
