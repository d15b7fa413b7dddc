"""Gradient norm and clipping over parameters that may be DTensors (tensor parallel, FSDP) or plain tensors.

torch's own helpers (``get_total_norm``, ``clip_grad_value_``, ``clip_grads_with_norm_``) batch their work
with foreach kernels, which refuse a list that mixes DTensors and plain tensors (tensor parallelism shards
some layers and replicates the rest). These group the tensors by kind and call torch on each group, so a
plain list takes exactly torch's path.

Example:
    >>> params = [torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(1))]
    >>> for p in params:
    ...     p.grad = torch.full_like(p, 2.0)
    >>> norm = total_norm([p.grad for p in params])
    >>> float(norm)
    4.0
    >>> clip_by_norm_(params, 1.0, norm)
    >>> round(float(total_norm([p.grad for p in params])), 4)
    1.0
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence

import torch


def is_dtensor(tensor: object) -> bool:
    """Whether `tensor` is a DTensor (without importing torch.distributed.tensor, slow to import: if it
    was never imported, nothing is a DTensor)."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(tensor, module.DTensor)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """The part of `tensor` stored in this process (a DTensor's local shard; a plain tensor itself)."""
    return tensor.to_local() if is_dtensor(tensor) else tensor


def total_norm(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all `grads` together, as a plain scalar tensor (a DTensor's norm covers every shard)."""
    norms = []
    for group in _by_kind(grads):
        norm = torch.nn.utils.get_total_norm(group)
        norms.append(norm.full_tensor() if is_dtensor(norm) else norm)
    if not norms:
        return torch.tensor(0.0)
    if len(norms) == 1:
        return norms[0]
    return torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms]))


def clip_by_value_(params: Sequence[torch.Tensor], value: float) -> None:
    """Clamp every gradient element of `params` into [-value, value], in place."""
    for group in _by_kind([p for p in params if p.grad is not None]):
        torch.nn.utils.clip_grad_value_(group, value)


def clip_by_norm_(params: Sequence[torch.Tensor], max_norm: float, norm: torch.Tensor) -> None:
    """Scale the gradients of `params` in place so that their total norm (`norm`, from `total_norm`) is at
    most `max_norm`."""
    for group in _by_kind([p for p in params if p.grad is not None]):
        if is_dtensor(group[0]):  # torch's foreach scaling refuses a plain coefficient
            coefficient = min(max_norm / (float(norm) + 1e-6), 1.0)
            for param in group:
                param.grad.mul_(coefficient)
        else:
            torch.nn.utils.clip_grads_with_norm_(group, max_norm, norm)


def _by_kind(tensors: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    """The plain tensors of `tensors`, then its DTensors by device mesh (torch combines DTensors of one
    mesh only: FSDP over tensor parallel leaves some on the 2-D mesh, the rest on the data dimension's), as
    separate non-empty lists."""
    groups: dict[object, list[torch.Tensor]] = {}
    for tensor in tensors:
        key = tensor.device_mesh if is_dtensor(tensor) else None
        groups.setdefault(key, []).append(tensor)
    plain = groups.pop(None, [])
    return ([plain] if plain else []) + list(groups.values())


def clip_(
    params: Iterable[torch.Tensor],
    *,
    clip_value: float,
    clip_norm: float,
    norm_of: Callable[[list[torch.Tensor]], torch.Tensor] = total_norm,
    measure: bool = False,
) -> float | None:
    """Clip the gradients of `params` by value, then by global norm (0 turns either off), in place.

    `norm_of` computes the whole model's gradient norm (a strategy's, across shards). Returns the norm
    before clipping when `measure`, else None.
    """
    if not (measure or clip_value or clip_norm):
        return None  # reading every parameter's .grad costs ~0.3 µs each: not on a step that needs none
    params = [p for p in params if p.grad is not None]
    grads = [p.grad for p in params]
    norm = norm_of(grads) if measure or clip_norm else None
    if clip_value:
        clip_by_value_(params, clip_value)
    if clip_norm:
        clip_by_norm_(params, clip_norm, norm_of(grads) if clip_value else norm)
    return float(norm) if measure else None
