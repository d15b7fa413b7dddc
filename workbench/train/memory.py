"""What one rank holds in memory for training: parameters, gradients, optimizer state and activations.

`StepMemoryProbe` watches one training step: it tracks the tensors autograd saves for backward (through
``torch.autograd.graph.saved_tensors_hooks``) while they are alive, so ``activations`` is their peak, e.g.
the micro-batches a pipeline schedule keeps in flight at once, not just their sum. On a GPU it also reads
``torch.cuda.max_memory_allocated`` over the step. Bytes are counted per storage, once, as stored on this
rank: a DTensor counts its local shard (FSDP and tensor parallel), a pipeline stage only its own layers.

Example:
    >>> model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 1))
    >>> optimizer = torch.optim.Adam(model.parameters())
    >>> probe = StepMemoryProbe(model, torch.device("cpu"))
    >>> with probe:
    ...     model(torch.zeros(8, 10)).sum().backward()
    >>> optimizer.step()
    >>> memory = probe.report(optimizer)
    >>> memory["params"], memory["grads"], memory["optimizer_state"] >= 2 * memory["params"]
    (964, 964, True)
    >>> memory["activations"]  # the input (8×10), the ReLU output (8×20): 4 bytes each
    960
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import torch

from workbench.train.gradients import local


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` on this rank (views and shards counted once)."""
    seen: dict[int, int] = {}
    for tensor in tensors:
        storage = local(tensor).untyped_storage()
        seen.setdefault(storage.data_ptr(), storage.nbytes())
    return sum(seen.values())


def state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """This rank's optimizer-state tensors: for ZeRO's ``ZeroRedundancyOptimizer``, its local optimizer's
    (this rank's shard of the parameters); DTensor states as their local shards."""
    zero = sys.modules.get("torch.distributed.optim")  # imported wherever such an optimizer exists
    if zero is not None and isinstance(optimizer, zero.ZeroRedundancyOptimizer):
        optimizer = optimizer.optim
    states = optimizer.state.values()
    return [local(t) for state in states for t in state.values() if isinstance(t, torch.Tensor)]


class StepMemoryProbe:
    """A context manager around one step's forward and backward passes of `model` (parameters saved for
    backward are not activations); `report` after the optimizer step."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device
        self.live = 0  # bytes of saved tensors alive now
        self.peak = 0
        self._counts: dict[int, int] = {}  # storage address → saved tensors holding it
        self._hooks: Any = None
        # the parameters' storages, read once; None where FSDP registers gathered parameters only while
        # their layer runs (then they are read at each saved tensor, as they are at that moment)
        self._params: set[int | None] | None = None

    def __enter__(self) -> StepMemoryProbe:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self._params = None if _gathers_parameters(self.model) else self._parameter_storages()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)

    def report(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Bytes on this rank: ``params``, ``grads`` (call before zero_grad), ``optimizer_state``,
        ``activations`` (peak saved for backward), ``cuda_peak`` (GPU, else None), ``device``."""
        params = list(self.model.parameters())
        state = state_tensors(optimizer)
        cuda_peak = None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            cuda_peak = torch.cuda.max_memory_allocated(self.device)
        return {
            "params": storage_bytes(params),
            "grads": storage_bytes(p.grad for p in params if p.grad is not None),
            "optimizer_state": storage_bytes(state),
            "activations": self.peak,
            "cuda_peak": cuda_peak,
            "device": str(self.device),
        }

    def _pack(self, tensor: torch.Tensor) -> Any:
        address, nbytes = _storage_of(tensor)
        params = self._params if self._params is not None else self._parameter_storages()
        if address is None or address in params or nbytes == 0:
            return tensor
        count = self._counts.get(address, 0)
        if count == 0:
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        self._counts[address] = count + 1
        return _Saved(tensor, address, nbytes, self)

    def _parameter_storages(self) -> set[int | None]:
        return {_storage_of(p)[0] for p in self.model.parameters()}

    def _release(self, address: int, nbytes: int) -> None:
        count = self._counts[address] - 1
        if count:
            self._counts[address] = count
        else:
            del self._counts[address]
            self.live -= nbytes


class _Saved:
    """A saved tensor as autograd holds it; when autograd frees it (after its backward), it stops counting."""

    __slots__ = ("address", "nbytes", "probe", "tensor")

    def __init__(self, tensor: torch.Tensor, address: int, nbytes: int, probe: StepMemoryProbe) -> None:
        self.tensor, self.address, self.nbytes, self.probe = tensor, address, nbytes, probe

    def __del__(self) -> None:
        self.probe._release(self.address, self.nbytes)


def _unpack(saved: Any) -> torch.Tensor:
    return saved.tensor if isinstance(saved, _Saved) else saved


def _gathers_parameters(model: torch.nn.Module) -> bool:
    """Whether FSDP2 shards `model` (it registers each unit's gathered parameters only while the unit runs,
    and frees them after, so their addresses come back as activations)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")  # imported wherever a model is sharded
    module_type = getattr(fsdp, "FSDPModule", None)
    return module_type is not None and any(isinstance(m, module_type) for m in model.modules())


def _storage_of(tensor: torch.Tensor) -> tuple[int | None, int]:
    """The address and bytes of `tensor`'s storage (a DTensor's local one); (None, 0) for a tensor without a
    storage of its own (a wrapper subclass, a storage FSDP freed: torch refuses its data pointer)."""
    try:
        storage = local(tensor).untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except RuntimeError:
        return None, 0
