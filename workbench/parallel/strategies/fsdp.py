"""Sharded data parallel with FSDP2 (``torch.distributed.fsdp.fully_shard``).

Like DDP every rank trains on its own shard of each batch, but no rank keeps a whole copy of the model:
parameters, gradients and optimizer state are split across the ranks (each holds 1/N of every tensor).
Before a layer runs, its parameters are all-gathered; after, the full copy is freed again; gradients are
reduce-scattered so each rank keeps, and updates, only its shard. Memory for the model's state drops to
about 1/N per rank, for more communication per step than DDP.

    strategy = FullyShardedDataParallel()                            # every top-level layer its own unit
    launch(train, 2, strategy=strategy, model=model, config=config)
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from workbench.parallel.strategies.collective_times import CollectiveTimes, TimedAllGather, TimedReduceScatter
from workbench.parallel.strategies.sharded import ShardedStrategy
from workbench.train.compilation import refuse_compile
from workbench.train.config import TrainConfig
from workbench.train.step_time import Clock


class FullyShardedDataParallel(ShardedStrategy):
    """FSDP2: parameters, gradients and optimizer state sharded across all ranks; data sharded as in DDP.

    Args:
        units: the submodules (dotted names) that become their own FSDP unit, gathered and freed together;
            default: every top-level child that has parameters (a transformer's blocks, a CNN's layers).
            The root is always a unit too (for the rest of the parameters).
        reshard_after_forward: free each unit's gathered parameters after its forward (gather them again
            for backward): least memory. False keeps them until backward: less communication.
        cpu_offload: keep the sharded parameters, gradients and optimizer state in host memory and run the
            optimizer step on the CPU (FSDP2's ``CPUOffloadPolicy``); needs GPUs (nccl).
        sync_control: see `DistributedStrategy` (`launch` turns it on).

    Example:
        >>> from workbench import models
        >>> from workbench.train import TrainConfig
        >>> FullyShardedDataParallel(units=["1"]).validate(models.mlp(4, 2), TrainConfig(), world_size=2)
        >>> FullyShardedDataParallel(units=["fc"]).validate(models.mlp(4, 2), TrainConfig(), world_size=2)
        Traceback (most recent call last):
        ...
        ValueError: units names 'fc', which is not a submodule of the model; its top-level layers: 0, 1, ...
    """

    name = "FSDP"

    def __init__(
        self,
        *,
        units: Sequence[str] | None = None,
        reshard_after_forward: bool = True,
        cpu_offload: bool = False,
        sync_control: bool = False,
    ) -> None:
        super().__init__(sync_control=sync_control)
        if units is not None and (isinstance(units, str) or not all(isinstance(u, str) for u in units)):
            raise ValueError(f"units must be a list of submodule names, e.g. ['block0'], got {units!r}")
        self.units = None if units is None else list(units)
        self.reshard_after_forward = bool(reshard_after_forward)
        self.cpu_offload = bool(cpu_offload)
        self._collectives: CollectiveTimes | None = None  # timed on CPU (gloo): see wrap

    def validate(self, model: nn.Module | None, config: TrainConfig, world_size: int | None = None) -> None:
        """Raise ValueError for units that name no submodule, CPU offload without GPUs, fp16 or compile."""
        refuse_compile(
            config.compile,
            "FullyShardedDataParallel",
            "compiling sharded blocks is not built here",
        )
        if model is not None:
            self.unit_modules(model)
        if self.cpu_offload and not torch.cuda.is_available():
            raise ValueError(
                "cpu_offload=True needs GPUs (nccl): it moves the shards from GPU memory to pinned host "
                "memory; on CPU training they are in host memory already, so leave cpu_offload=False"
            )
        if config.precision == "fp16":
            raise ValueError(
                "precision='fp16' is not supported with FSDP here (it needs a sharded GradScaler); use 'bf16'"
            )

    def wrap(self, model: nn.Module) -> nn.Module:
        """Shard `model` in place (`apply_fully_shard`); on CPU, time its collectives call by call."""
        from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy

        offload = CPUOffloadPolicy() if self.cpu_offload else OffloadPolicy()
        model.to(self.device)
        units = self.unit_modules(model)
        apply_fully_shard(
            model,
            self.mesh(),
            units,
            reshard_after_forward=self.reshard_after_forward,
            offload_policy=offload,
        )
        if self.device.type == "cpu":  # synchronous collectives: their calls are the rank's waits
            self._collectives = CollectiveTimes()
            for module in (*units, model):
                module.set_custom_all_gather(TimedAllGather(self._collectives))
                module.set_custom_reduce_scatter(TimedReduceScatter(self._collectives))
        self.module = model
        return model

    def forward_backward(
        self, model: nn.Module, group: list, *args: Any, **kwargs: Any
    ) -> torch.Tensor | None:
        if self._collectives is not None:
            self._collectives.take()  # an evaluation's all-gathers since the last step are not this step's
        return super().forward_backward(model, group, *args, **kwargs)

    def split_collectives(self, clock: Clock, phase: str) -> None:
        """On CPU: the all-gathers and reduce-scatters of `phase`, timed call by call, are communication
        (synchronous: all exposed). On GPUs they stay inside forward and backward, as the step says."""
        if self._collectives is None:
            super().split_collectives(clock, phase)
        else:
            clock.move(phase, "comm", self._collectives.take())

    def no_sync(self, model: nn.Module, active: bool) -> contextlib.AbstractContextManager:
        """Accumulate unsharded gradients without reduce-scattering them (all but the last micro-batch)."""
        return _without_gradient_sync(model) if active else contextlib.nullcontext()

    def eval_forward_passes(self, local_batches: int) -> int:
        """The most batches any rank evaluates: every forward gathers parameters from every rank."""
        return int(self.all_reduce(torch.tensor(local_batches, device=self.device), "max"))

    def summary(self) -> str:
        return "FSDP, CPU offload" if self.cpu_offload else "FSDP"

    def unit_modules(self, model: nn.Module) -> list[nn.Module]:
        """The submodules that become FSDP units (`units`, or every top-level child with parameters)."""
        if self.units is None:
            return [child for child in model.children() if any(True for _ in child.parameters())]
        modules = dict(model.named_modules())
        for unit in self.units:
            if unit not in modules or unit == "":
                layers = ", ".join(name for name, _ in model.named_children())
                raise ValueError(
                    f"units names {unit!r}, which is not a submodule of the model; its top-level layers: "
                    f"{layers}"
                )
        return [modules[unit] for unit in self.units]


def apply_fully_shard(model: nn.Module, mesh: Any, units: Sequence[nn.Module], **options: Any) -> None:
    """FSDP2 over the 1-D `mesh`, in place: each of `units` its own unit, then the root; `options` are
    ``fully_shard``'s (``reshard_after_forward``, ``offload_policy``).

    Also silences torch's warning that a unit returned a view (a Linear on (B, T, C) inputs does): it
    guards against changing that output in place, which the Trainer never does.
    """
    from torch.distributed.fsdp import fully_shard

    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module \(\w+\) returned a view tensor")
    for unit in units:
        fully_shard(unit, mesh=mesh, **options)
    fully_shard(model, mesh=mesh, **options)


@contextlib.contextmanager
def _without_gradient_sync(model: nn.Module):
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
