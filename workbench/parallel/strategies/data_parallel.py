"""`DataParallel` (DDP): every rank trains a full copy of the model on its shard of each batch."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch

from workbench._validate import check_int
from workbench.parallel.strategies.distributed import DistributedStrategy
from workbench.train.compilation import uncompiled
from workbench.train.step_time import Clock


class DataParallel(DistributedStrategy):
    """DistributedDataParallel: every rank trains a full copy of the model on its shard of every batch.

    DDP all-reduces (averages) the gradients during backward, so every copy takes the same optimizer step.
    The `Trainer` shards the data by ``rank``/``world_size``, reduces logged losses and evaluations over
    all ranks, and lets only rank 0 write checkpoints and the metrics log.

    Args:
        find_unused_parameters: for a model whose loss leaves some parameters without a gradient on some
            steps (a branch, an auxiliary head): DDP then finds them after each forward (a walk of the
            graph per step), instead of waiting for their gradients forever.
        sync_control: see `DistributedStrategy` (`launch` turns it on).

    Example (two processes from this one; under torchrun, ``DataParallel.from_env()``):
        >>> import torch, torch.nn.functional as F
        >>> from torch.utils.data import TensorDataset
        >>> from workbench.parallel import launch
        >>> from workbench.train import TrainConfig, Trainer
        >>> def train(strategy):
        ...     torch.manual_seed(0)  # the same data on every rank; each trains on its shard
        ...     data = TensorDataset(torch.randn(64, 3), torch.arange(64) % 2)
        ...     config = TrainConfig(epochs=1, batch_size=16)  # per rank: 32 samples a step in all
        ...     trainer = Trainer(torch.nn.Linear(3, 2), F.cross_entropy, data, config, strategy=strategy)
        ...     return strategy.world_size, trainer.fit().step
        >>> launch(train, nprocs=2, strategy=DataParallel(), verbose=False)
        (2, 2)
    """

    name = "data parallel"

    def __init__(self, *, find_unused_parameters: bool = False, sync_control: bool = False) -> None:
        super().__init__(sync_control=sync_control)
        if not isinstance(find_unused_parameters, bool):
            raise TypeError(f"find_unused_parameters must be True or False, got {find_unused_parameters!r}")
        self.find_unused_parameters = find_unused_parameters
        self._buckets = BucketTimes()

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """DDP around `model`, moved to `device`; parameters are broadcast from rank 0."""
        self.module = model = model.to(self.device)
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        # gradients live in the all-reduce buckets (no copy in and out of them each step)
        ddp = torch.nn.parallel.DistributedDataParallel(
            model,
            device_ids=device_ids,
            gradient_as_bucket_view=True,
            find_unused_parameters=self.find_unused_parameters,
        )
        ddp.register_comm_hook(self._buckets, timed_allreduce_hook)
        return ddp

    def backward(self, loss: torch.Tensor, clock: Clock) -> None:
        """Backward, whose time splits into compute and the all-reduce it waited for at its end (comm);
        the all-reduce time that overlapped the compute is reported as ``comm_overlapped``."""
        self._buckets.timing = clock.enabled
        self._buckets.spans.clear()
        started = time.perf_counter()
        loss.backward()
        clock.mark("backward")
        if clock.enabled and self._buckets.spans:
            exposed, overlapped = self._buckets.split(started, time.perf_counter())
            clock.move("backward", "comm", exposed)
            clock.overlapped(overlapped)

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        model = uncompiled(model)
        return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model

    def no_sync(self, model: torch.nn.Module, active: bool) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce (for all but the last micro-batch of an accumulated step)."""
        model = uncompiled(model)  # TrainConfig(compile=...) steps run DDP compiled
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


@dataclass
class BucketTimes:
    """When each gradient bucket of a timed backward was ready and when its all-reduce ended
    (``time.perf_counter()``), recorded by `timed_allreduce_hook` while `timing` is on."""

    timing: bool = False
    spans: list[tuple[float, float]] = field(default_factory=list)

    def split(self, started: float, ended: float) -> tuple[float, float]:
        """(exposed, overlapped) seconds of all-reduce in a backward that ran from `started` to `ended`.

        Exposed: what was still being sent after the last bucket was ready (the gradients' compute had
        ended), up to the end of backward. Overlapped: the rest of the time some bucket was in flight.

        Example (buckets ready at 1 and 3 s, their all-reduces ending at 2.5 and 4 s):
            >>> BucketTimes(spans=[(1.0, 2.5), (3.0, 4.0)]).split(0.0, 4.2)
            (1.0, 1.5)
        """
        compute_end = max(ready for ready, _ in self.spans)
        in_flight = _union_length([(max(ready, started), min(done, ended)) for ready, done in self.spans])
        exposed = max(0.0, min(ended, max(done for _, done in self.spans)) - compute_end)
        return exposed, max(0.0, in_flight - exposed)


def timed_allreduce_hook(state: BucketTimes, bucket):
    """DDP's default all-reduce (the bucket averaged over the ranks), timed when `state.timing` is on.

    Unannotated `bucket` and return on purpose: DDP rejects string annotations.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    future = default_hooks.allreduce_hook(None, bucket)
    if not state.timing:
        return future
    ready = time.perf_counter()

    def ended(done):
        state.spans.append((ready, time.perf_counter()))
        return done.value()

    return future.then(ended)


def _union_length(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of `spans` ((start, end) pairs, any order)."""
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered
