"""Batches onto the GPU without waiting for them: the fast input path the `Trainer` takes on CUDA.

- An in-memory workbench `Dataset` that fits in a quarter of the GPU's free memory moves there once
  (`device_resident`): every batch is then gathered on the device, with no copy per step.
- Anything else (a dataset too large, your torch ``Dataset`` or ``DataLoader``) goes through
  `prefetch_to_device`: each batch in page-locked (pinned) host memory, its copy issued on a side CUDA stream
  one batch ahead, so it travels while the current batch computes; the step's stream waits for that copy's
  event only. A pageable tensor's ``.to("cuda", non_blocking=True)`` would be synchronous.

On a CPU both are the identity: the batches are where training runs already.

Example:
    >>> import torch
    >>> from workbench.data import load_dataset
    >>> digits = load_dataset("digits")
    >>> device_resident(digits, torch.device("cpu")) is digits
    True
    >>> batches = [(torch.zeros(2, 3), torch.ones(2))]
    >>> list(prefetch_to_device(batches, torch.device("cpu"))) == batches
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from workbench.data.batch import map_tensors
from workbench.data.datasets import Dataset

RESIDENT_FRACTION = 0.25  # of the GPU's free memory a dataset may take to be moved there whole


def dataset_bytes(dataset: Dataset) -> int:
    """Bytes of the dataset's features and targets."""
    return sum(t.numel() * t.element_size() for t in (dataset.features, dataset.targets))


def fits_on_device(nbytes: int, device: torch.device, fraction: float = RESIDENT_FRACTION) -> bool:
    """Whether `nbytes` take at most `fraction` of `device`'s free memory (False off CUDA: nothing to gain).

    Example:
        >>> fits_on_device(10**6, torch.device("cpu"))
        False
    """
    if device.type != "cuda":
        return False
    free, _ = torch.cuda.mem_get_info(device)
    return nbytes <= fraction * free


def device_resident(dataset: Dataset, device: torch.device) -> Dataset:
    """`dataset` with its tensors on `device` when it fits there (`fits_on_device`); else `dataset`."""
    if dataset.features.device == device or not fits_on_device(dataset_bytes(dataset), device):
        return dataset
    return Dataset(
        dataset.name,
        dataset.features.to(device),
        dataset.targets.to(device),
        dataset.task,
        dataset.num_classes,
        dataset.info,
    )


def prefetch_to_device(batches: Iterable[Any], device: torch.device) -> Iterator[Any]:
    """`batches` on `device`, each copied from pinned memory on a side stream one batch ahead (CUDA);
    anywhere else, `batches` as they come."""
    if device.type != "cuda":
        yield from batches
        return
    side = torch.cuda.Stream(device)
    pending: tuple[Any, torch.cuda.Event] | None = None
    for batch in batches:
        upcoming = _send(batch, device, side)
        if pending is not None:
            yield _receive(*pending, device)
        pending = upcoming
    if pending is not None:
        yield _receive(*pending, device)


def _send(batch: Any, device: torch.device, side: torch.cuda.Stream) -> tuple[Any, torch.cuda.Event]:
    """Start copying `batch` to `device` on the side stream; the event marks the copy's end."""

    def copy(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type == "cuda":
            return tensor
        source = tensor if tensor.is_pinned() else tensor.pin_memory()
        return source.to(device, non_blocking=True)

    with torch.cuda.stream(side):
        moved = map_tensors(batch, copy)
        done = torch.cuda.Event()
        done.record(side)
    return moved, done


def _receive(batch: Any, done: torch.cuda.Event, device: torch.device) -> Any:
    """`batch` usable on the current stream: it waits for the copy, and the copies' memory is not reused
    before the current stream is done with them."""
    current = torch.cuda.current_stream(device)
    current.wait_event(done)

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type == "cuda":
            tensor.record_stream(current)
        return tensor

    return map_tensors(batch, keep)
