"""Batches of any structure: move their tensors to a device and count their samples.

A batch is whatever a loader yields: a tensor, a tuple/list (``(inputs, target)``), a dict
(``{"input_ids": ..., "labels": ...}``), a namedtuple, or any nesting of these. Tensors move; everything
else (strings, numbers, None) is left as it is.

    >>> import torch
    >>> batch = {"x": torch.zeros(4, 3), "meta": ["a", "b", "c", "d"], "pair": (torch.ones(4), 7)}
    >>> moved = move_batch(batch, torch.device("cpu"))
    >>> batch_size_of(moved), moved["meta"][0], moved["pair"][1]
    (4, 'a', 7)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch


def move_batch(batch: Any, device: torch.device, *, non_blocking: bool = False) -> Any:
    """`batch` with every tensor in it on `device` (the same structure; non-tensors untouched)."""
    return map_tensors(batch, lambda tensor: tensor.to(device, non_blocking=non_blocking))


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`batch` with `fn` applied to every tensor in it (the same structure; non-tensors untouched).

    Example:
        >>> map_tensors({"x": torch.ones(2), "n": 3}, lambda t: t * 2)["x"]
        tensor([2., 2.])
    """
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if type(batch) is tuple:  # the common (inputs, target) pair: no generic machinery
        return tuple(map_tensors(part, fn) for part in batch)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(map_tensors(part, fn) for part in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(map_tensors(part, fn) for part in batch)
    if isinstance(batch, Mapping):
        mapped = {key: map_tensors(value, fn) for key, value in batch.items()}
        return mapped if type(batch) is dict else _same_mapping(batch, mapped)
    return batch


def batch_size_of(batch: Any) -> int:
    """Samples in `batch`: the leading dimension of its first tensor (depth first; 1 if it has none)."""
    tensor = first_tensor(batch)
    if tensor is None or tensor.ndim == 0:
        return 1
    return int(tensor.shape[0])


def first_tensor(batch: Any) -> torch.Tensor | None:
    """The first tensor found in `batch`, depth first, or None."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, Mapping):
        batch = list(batch.values())
    if isinstance(batch, list | tuple):
        for part in batch:
            tensor = first_tensor(part)
            if tensor is not None:
                return tensor
    return None


def named_tensors(batch: Any, name: str = "batch") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in `batch`, depth first, with where it sits.

    Example:
        >>> [where for where, _ in named_tensors({"x": torch.zeros(2), "pair": (torch.ones(2), 7)})]
        ["batch['x']", "batch['pair'][0]"]
    """
    if isinstance(batch, torch.Tensor):
        yield name, batch
    elif isinstance(batch, Mapping):
        for key, value in batch.items():
            yield from named_tensors(value, f"{name}[{key!r}]")
    elif isinstance(batch, list | tuple):
        for index, part in enumerate(batch):
            yield from named_tensors(part, f"{name}[{index}]")


def describe_batch(batch: Any) -> str:
    """A short structural description for error messages.

    Example:
        >>> describe_batch({"x": torch.zeros(4, 3), "y": torch.zeros(4, dtype=torch.int64)})
        'dict(x: (4, 3) float32, y: (4,) int64)'
    """
    if isinstance(batch, torch.Tensor):
        return f"{tuple(batch.shape)} {str(batch.dtype).removeprefix('torch.')}"
    if isinstance(batch, Mapping):
        return "dict(" + ", ".join(f"{key}: {describe_batch(value)}" for key, value in batch.items()) + ")"
    if isinstance(batch, list | tuple):
        inner = ", ".join(describe_batch(part) for part in batch)
        return f"({inner})" if isinstance(batch, tuple) else f"[{inner}]"
    return type(batch).__name__


def _same_mapping(original: Mapping, moved: dict) -> Any:
    try:
        return type(original)(moved)
    except TypeError:  # a mapping type that cannot be built from a dict: a plain dict then
        return moved
