"""`copied_with`: a module's copy whose parameters and buffers are made by a function of the originals (fake
tensors for tracing, CPU copies for a check), without deepcopy copying each real tensor first."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn


def copied_with(model: nn.Module, tensor_of: Callable[[torch.Tensor], torch.Tensor]) -> nn.Module:
    """`model` deep-copied with every parameter and buffer replaced by ``tensor_of(original)`` (a parameter
    stays a parameter with the same ``requires_grad``).

    Example:
        >>> model = nn.Linear(2, 1)
        >>> twin = copied_with(model, lambda t: t.detach().to("cpu", copy=True))
        >>> twin.weight is model.weight, torch.equal(twin.weight, model.weight), twin.weight.requires_grad
        (False, True, True)
    """
    memo: dict[int, object] = {}
    for parameter in model.parameters():
        memo[id(parameter)] = nn.Parameter(tensor_of(parameter), parameter.requires_grad)
    for buffer in model.buffers():
        memo[id(buffer)] = tensor_of(buffer)
    return copy.deepcopy(model, memo)
