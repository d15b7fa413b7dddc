"""Measure what one training step keeps in memory: the proxy the estimates are tested against.

The CPU proxy for peak training memory is params + grads + optimizer state + saved activations
(+ DDP gradient buckets), where

- params: bytes of the model's parameters;
- grads: the sum of ``p.grad`` bytes after backward;
- optimizer state: the sum of tensor bytes in ``optimizer.state`` after the step;
- activations: the bytes of the tensors autograd saves for backward, seen through
  ``torch.autograd.graph.saved_tensors_hooks``; tensors sharing a storage count once (whole storage),
  parameter storages are left out (they are params), the input counts when saved;
- buckets: DDP's flat gradient buffers as `counting_allreduce_hook` saw them, less any that alias
  ``.grad`` (``gradient_as_bucket_view=True``).

On CUDA the step is also measured with ``torch.cuda.max_memory_allocated`` (peak statistics reset first);
that figure includes the batch and anything else allocated on the device.

Example:
    >>> import torch
    >>> from torch.nn import functional
    >>> model = torch.nn.Linear(10, 1)
    >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> inputs, targets = torch.zeros(8, 10), torch.zeros(8, 1)
    >>> step = measure_training_step(model, optimizer, functional.mse_loss, inputs, targets)
    >>> step.params, step.grads, step.activations
    (44, 44, 384)

DDP's gradient buckets, logged by `counting_allreduce_hook` into a `BucketLog` (a process group of one), come
into the `StepMemory`:
    >>> import torch.distributed as dist
    >>> from torch.nn.parallel import DistributedDataParallel
    >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    >>> ddp, log = DistributedDataParallel(torch.nn.Linear(10, 1)), BucketLog()
    >>> ddp.register_comm_hook(log, counting_allreduce_hook)
    >>> sgd = torch.optim.SGD(ddp.parameters(), lr=0.1)
    >>> measure_training_step(ddp, sgd, functional.mse_loss, inputs, targets, buckets=log)
    StepMemory(params=44, grads=44, optimizer_state=0, activations=384, buckets=44, cuda_peak=None)
    >>> log.allreduce_bytes  # 10 weights and a bias, in fp32
    44
    >>> dist.destroy_process_group()
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from workbench.train.gradients import local
from workbench.train.memory import state_tensors

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class BucketLog:
    """State for `counting_allreduce_hook`: bytes all-reduced, and each bucket buffer's storage."""

    allreduce_bytes: int = 0
    buffers: dict[int, int] = field(default_factory=dict)  # storage address -> storage bytes


def counting_allreduce_hook(state: BucketLog, bucket):
    """A DDP communication hook: log the bucket (a ``dist.GradBucket``), then run DDP's default all-reduce.

    Unannotated on purpose: DDP rejects string annotations (``from __future__ import annotations``).

    Use as ``ddp_model.register_comm_hook(log, counting_allreduce_hook)``.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    buffer = bucket.buffer()
    state.allreduce_bytes += buffer.numel() * buffer.element_size()
    storage = buffer.untyped_storage()
    state.buffers[storage.data_ptr()] = storage.nbytes()
    return default_hooks.allreduce_hook(None, bucket)


@dataclass(frozen=True)
class StepMemory:
    """Bytes measured around one training step; `total` is the CPU proxy for the peak.

    `cuda_peak` is ``torch.cuda.max_memory_allocated`` over the step on a CUDA model, else None.

    Example (the module's nn.Linear(10, 1) step: 44 bytes of weights, as many of gradients, 384 saved):
        >>> StepMemory(params=44, grads=44, optimizer_state=0, activations=384).total
        472
    """

    params: int
    grads: int
    optimizer_state: int
    activations: int
    buckets: int = 0
    cuda_peak: int | None = None

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer_state + self.activations + self.buckets


def measure_training_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    autocast_dtype: torch.dtype | None = None,
    buckets: BucketLog | None = None,
) -> StepMemory:
    """Run forward, backward and ``optimizer.step()`` once and measure them (see the module docstring).

    Args:
        model: the module to train (may be DistributedDataParallel-wrapped).
        optimizer: its optimizer; its state is measured after the step.
        loss_fn: ``loss_fn(model(inputs), targets)``.
        autocast_dtype: run the forward under ``torch.autocast`` with this dtype (e.g. torch.bfloat16).
        buckets: the `BucketLog` of a `counting_allreduce_hook` registered on the DDP model.
    """
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            saved.setdefault(storage.data_ptr(), storage.nbytes())
        return tensor

    device = inputs.device
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    optimizer.zero_grad(set_to_none=True)
    with (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor),
        torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext(),
    ):
        loss = loss_fn(model(inputs), targets)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    grad_storages = {g.untyped_storage().data_ptr() for g in grads}
    optimizer.step()
    cuda_peak = None
    if on_cuda:
        torch.cuda.synchronize(device)
        cuda_peak = torch.cuda.max_memory_allocated(device)
    state = state_tensors(optimizer)
    bucket_bytes = 0
    if buckets is not None:
        bucket_bytes = sum(n for address, n in buckets.buffers.items() if address not in grad_storages)
    return StepMemory(
        params=sum(p.nbytes for p in model.parameters()),
        grads=sum(g.nbytes for g in grads),
        optimizer_state=sum(t.nbytes for t in state),
        activations=sum(saved.values()),
        buckets=bucket_bytes,
        cuda_peak=cuda_peak,
    )


@dataclass(frozen=True)
class PeakMemory:
    """The allocator's peak over one training step, in bytes: `before` (what was alive when it began:
    parameters, buffers, optimizer state, the batch) plus `during` (the most the step allocated on top);
    `source` names the counter. `proxy` is the older component count of the same step (`StepMemory`).
    `held_apart`: on CUDA, what the device held when the step began that is not the step's (the cuBLAS and
    cuBLASLt workspaces its first step made, other models' tensors): left out of `peak`."""

    peak: int
    before: int
    during: int
    source: str
    proxy: StepMemory | None = None
    held_apart: int = 0


def allocator_peak(step: Callable[[], object], alive: list[torch.Tensor], device: torch.device) -> PeakMemory:
    """Run `step` once and return the allocator's peak over it.

    CPU: torch.profiler's memory events (``profile_memory=True``): each allocation and free of torch's CPU
    allocator with its running total of what the profiled code allocated; `before` is the bytes of the
    distinct storages of `alive` (what the step starts with; its gradients must be None). CUDA:
    ``torch.cuda.max_memory_allocated`` over the step (peak statistics reset first), less what the device
    held at the start beyond `alive` (`held_apart`: library workspaces, cached handles, other tensors), so
    that both counters measure the step's own tensors.

    Example:
        >>> kept = torch.zeros(1000)  # 4,000 bytes alive before
        >>> peak = allocator_peak(lambda: torch.ones(2000) * 2, [kept], torch.device("cpu"))
        >>> peak.before, peak.during // 1000  # kB: the ones and their double were alive together
        (4000, 16)
    """
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in alive}
    before = sum(storages.values())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        held_apart = max(0, torch.cuda.memory_allocated(device) - before)
        step()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - held_apart
        source = "torch.cuda.max_memory_allocated, less what was held apart"
        return PeakMemory(peak, before, peak - before, source, held_apart=held_apart)
    import json
    import tempfile
    from pathlib import Path

    from torch.profiler import ProfilerActivity

    from workbench._profiler import profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as recorded:
        step()
    with tempfile.TemporaryDirectory(prefix="workbench-peak-") as folder:
        trace = Path(folder) / "trace.json"
        recorded.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    cpu_events = [
        e for e in events if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type") == 0
    ]
    memory = [e["args"] for e in sorted(cpu_events, key=lambda e: e.get("ts", 0))]
    # "Total Allocated" runs on across profiles (what earlier ones allocated and kept counts too): the peak
    # is taken relative to the total just before this profile's first event
    start = memory[0]["Total Allocated"] - memory[0]["Bytes"] if memory else 0
    during = max([0, *(args["Total Allocated"] - start for args in memory)])
    return PeakMemory(before + during, before, during, "torch.profiler memory events (CPU allocator)")


def measure_peak(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    autocast_dtype: torch.dtype | None = None,
    proxy: bool = True,
    buckets: BucketLog | None = None,
) -> PeakMemory:
    """The allocator's peak over a training step taken once the optimizer state exists (a first step runs
    unmeasured), with the component proxy of a third step (`measure_training_step`) beside it (`proxy`).

    The step is the Trainer's: forward (under autocast when `autocast_dtype` is given) and loss, backward,
    ``optimizer.step()``, gradients set to None. On a rank of a distributed model it is this rank's peak:
    FSDP's and tensor parallel's DTensors count their local shards, ``ZeroRedundancyOptimizer`` its
    shard of the state, and a DDP model's gradient buckets count when `buckets` is the `BucketLog` of a
    `counting_allreduce_hook` registered on it (they live from the first step on, beside ``.grad``
    or under it with ``gradient_as_bucket_view``; DDP rebuilds them after its first step, so a second
    step runs unmeasured then). A batch that is a view into a larger tensor (a dataset's first rows) is
    copied first, so that the dataset does not count as what the step began with.
    """
    device = inputs.device
    inputs, targets = _own_storage(inputs), _own_storage(targets)

    def step() -> None:
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    if buckets is not None:
        step()
        buckets.buffers.clear()  # the measured step's buckets are logged anew
    parameters = [local(t) for t in (*model.parameters(), *model.buffers())]
    peak = allocator_peak(step, [*parameters, *state_tensors(optimizer), inputs, targets], device)
    if buckets is not None:  # alive from the first step on
        bucket_bytes = sum(buckets.buffers.values())
        if device.type == "cuda":  # the device held them at the start: counted back from what was held apart
            moved = min(bucket_bytes, peak.held_apart)
            peak = replace(peak, peak=peak.peak + moved, before=peak.before + moved,
                           held_apart=peak.held_apart - moved)  # fmt: skip
        else:  # the CPU profile saw no allocation of them
            peak = replace(peak, peak=peak.peak + bucket_bytes, before=peak.before + bucket_bytes)
    if not proxy:
        return peak
    components = measure_training_step(
        model, optimizer, loss_fn, inputs, targets, autocast_dtype=autocast_dtype
    )
    return replace(peak, proxy=components)


def _own_storage(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor`, or a copy when it is a view into a larger storage."""
    return tensor if tensor.untyped_storage().nbytes() == tensor.nbytes else tensor.clone()
