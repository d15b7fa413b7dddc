"""`DataParallel` (DDP): every rank trains a full copy of the model on its shard of each batch."""

from __future__ import annotations

import contextlib

import torch

from workbench._validate import check_int
from workbench.parallel.distributed import DistributedStrategy


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
