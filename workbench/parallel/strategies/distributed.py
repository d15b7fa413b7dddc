"""`DistributedStrategy`: the part every multi-process strategy shares (binding to the process group,
collectives, syncing control requests, the trained weights on rank 0). `DataParallel`, FSDP, pipeline and
tensor parallel build on it.

Under ``torchrun`` build a strategy with its ``from_env`` (e.g. `DataParallel.from_env()`); inside
`workbench.parallel.launch` the launcher hands each worker its strategy, bound to the process group, as the
first argument of its function.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from workbench._validate import check_choice
from workbench.parallel.group.process_group import join_process_group_from_env, leave_process_group
from workbench.train.control import Changes, ControlMessage
from workbench.train.strategy import REDUCE_OPS, StrategyBase


class DistributedStrategy(StrategyBase):
    """A strategy over the current ``torch.distributed`` process group: gloo on CPU, nccl on GPUs.

    Build it anywhere (its options only); it joins the process group when bound: `launch` binds it in each
    worker, `from_env` under torchrun, and the `Trainer` when it starts. Subclasses say how the model is
    split or replicated.

    Args:
        sync_control: broadcast rank 0's control requests (pause, stop, lr, clipping) to every rank at each
            step boundary (one tiny broadcast per step). `launch` turns it on so its dashboard can steer.

    Example (built anywhere, bound later: no process group, no backend yet):
        >>> from workbench.parallel import DataParallel
        >>> strategy = DataParallel(sync_control=True)
        >>> isinstance(strategy, DistributedStrategy), strategy.backend, dist.is_initialized()
        (True, None, False)
    """

    name = "distributed"  # what `describe` calls the parallelism

    def __init__(self, *, sync_control: bool = False) -> None:
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
            backend: ``"gloo"`` or ``"nccl"``; default nccl where this machine has a GPU for each of the
                job's processes on it, else gloo (`workbench.parallel.group.process_group.place`).
            timeout_s: how long collectives (and the rendezvous) wait for the other ranks.
            **options: the strategy's own options (e.g. ``schedule="1f1b"`` for `PipelineParallel`).

        Such a launcher signals every rank itself: in `Trainer.fit`, the first SIGTERM (a time limit) or
        Ctrl-C stops every rank at the next logged step, saved, and ends each rank's script with exit status
        128 + the signal (`workbench.train.RanksStopped`, a SystemExit).

        Example (in a script started with ``torchrun --nproc-per-node 2 script.py``)::

            strategy = DataParallel.from_env()
            Trainer(model, loss_fn, splits, config, strategy=strategy, run="mine").fit(resume=True)
            strategy.close()
        """
        join_process_group_from_env(backend, timeout_s, who=f"{cls.__name__}.from_env")
        strategy = cls(**options)
        strategy.bind()
        strategy.signalled_by_launcher = True  # its launcher signals every rank: they stop together
        return strategy

    def bind(self) -> None:
        """Take rank, world size and device from the current process group (once)."""
        if self._bound:
            return
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                f"{type(self).__name__} needs a torch.distributed process group and none is initialised "
                "here: run the function through workbench.parallel.launch(fn, nprocs=N), or under torchrun "
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

    def sync_requests(self, changes: Changes, stop: bool) -> tuple[Changes, bool]:
        """Rank 0's requests, the same on every rank (when `sync_control`); others' are ignored."""
        if not self.sync_control:
            return changes, stop
        encoded = ControlMessage(stop=stop, changes=changes).encode()
        message = torch.tensor(encoded, dtype=torch.float64, device=self.device)
        dist.broadcast(message, src=0)
        received = ControlMessage.decode(message.tolist())
        return received.changes, received.stop

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
        processes = "process" if self.world_size == 1 else "processes"
        return f"{self.world_size} {processes} ({self.backend}, {where}{threads})"

    def describe(self) -> str:
        return f"{self.processes()}, {self.summary()}"

    def summary(self) -> str:
        """The parallelism in a few words, e.g. "pipeline: 2 stages, 4 micro-batches, 1F1B"."""
        return self.name

    def close(self, wait_for_others: bool = True) -> None:
        """Leave the process group (call once at the end of a torchrun script, on every rank).

        `wait_for_others`: a barrier first (the normal end); False after a failure, when the others may be
        gone and a barrier would only fail again.
        """
        if dist.is_initialized():
            leave_process_group(wait_for_others=wait_for_others)


def average_gradients(model: torch.nn.Module, group: Any, size: int) -> None:
    """Average every gradient of `model` over the process `group` of `size` ranks, in place (on each rank's
    own part of a DTensor gradient: the ranks of a data-parallel group hold the same parts)."""
    with torch.no_grad():
        for param in model.parameters():
            if param.grad is not None:
                grad = param.grad
                local = grad.to_local() if hasattr(grad, "to_local") else grad
                dist.all_reduce(local, group=group)
                local.div_(size)
