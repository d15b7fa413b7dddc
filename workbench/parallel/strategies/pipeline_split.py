"""What a pipeline is cut into and what each piece computes: `balanced_starts` (where each stage begins, so
the largest stage is as small as it can be), `as_sequential` (how a model of your own class becomes layers
to cut) and `MicrobatchLoss` (the loss of one micro-batch, weighted so a step's micro-batches add up to the
mean over all its samples)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from workbench._validate import check_int
from workbench.train.strategy import LossFn


def balanced_starts(sizes: Sequence[int], stages: int) -> list[int]:
    """Where each of `stages` consecutive groups of layers begins, so that the largest group's total
    size is as small as it can be (every stage gets at least one layer).

    Example:
        >>> balanced_starts([10, 0, 10, 0, 20], 2)  # a parameter-free layer stays with the one before it
        [0, 4]
        >>> balanced_starts([1, 1, 1, 1], 4)
        [0, 1, 2, 3]
    """
    n = len(sizes)
    check_int("stages", stages, minimum=1)
    if n < stages:
        raise ValueError(f"{n} layers cannot make {stages} stages (each needs at least one)")
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    # best[k][i]: the smallest possible largest group splitting layers[:i] into k groups; ties prefer
    # the later split, which moves parameter-free layers (activations) to the end of a stage
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for k in range(1, stages + 1):
        for i in range(k, n - (stages - k) + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                if cost <= best[k][i]:
                    best[k][i], cut[k][i] = cost, j
    starts, i = [], n
    for k in range(stages, 0, -1):
        i = cut[k][i]
        starts.append(i)
    return starts[::-1]


def as_sequential(model: nn.Module) -> str:
    """Why `model`, not an ``nn.Sequential``, cannot be cut into stages, and the ``nn.Sequential`` of its
    children to give instead (a child that is itself an ``nn.Sequential`` spread, so there are more places
    to cut).

    Example:
        >>> class Net(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        ...         self.head = nn.Linear(8, 2)
        >>> print(as_sequential(Net()))  # doctest: +NORMALIZE_WHITESPACE
        pipeline parallel splits an nn.Sequential at its top-level layers; got Net, whose children are body
        (Sequential of 2 layers) and head (Linear). If Net's forward applies them one after the other, give
        nn.Sequential(*model.body, model.head) (3 layers, the same parameters); if it does more between them
        (a residual, a reshape, a second input), make each such step a module of its own first
    """
    kind = type(model).__name__
    start = f"pipeline parallel splits an nn.Sequential at its top-level layers; got {kind}"
    children = list(model.named_children())
    if not children:
        return f"{start}, which has no layers to put on different ranks: give a model of several layers"
    parts, described, layers = [], [], 0
    for name, child in children:
        access = f"model.{name}" if name.isidentifier() else f"getattr(model, {name!r})"
        if isinstance(child, nn.Sequential):
            parts.append(f"*{access}")
            described.append(f"{name} (Sequential of {len(child)} layers)")
            layers += len(child)
        else:
            parts.append(access)
            described.append(f"{name} ({type(child).__name__})")
            layers += 1
    listed = described[0] if len(described) == 1 else ", ".join(described[:-1]) + " and " + described[-1]
    return (
        f"{start}, whose children are {listed}. If {kind}'s forward applies them one after the other, "
        f"give nn.Sequential({', '.join(parts)}) ({layers} layers, the same parameters); if it does more "
        "between them (a residual, a reshape, a second input), make each such step a module of its own first"
    )


class MicrobatchLoss:
    """The schedule's loss: the user's loss of one micro-batch, weighted so the micro-batches of an
    optimizer step sum to the mean over all its samples (the schedule's own scaling is off)."""

    def __init__(self) -> None:
        self.loss_fn: LossFn | None = None
        self.weight = 1.0  # per sample: 1 / samples in the optimizer step

    def use(self, loss_fn: LossFn, weight: float) -> None:
        self.loss_fn, self.weight = loss_fn, weight

    def __call__(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        assert self.loss_fn is not None
        return self.loss_fn(output, target) * (len(target) * self.weight)
