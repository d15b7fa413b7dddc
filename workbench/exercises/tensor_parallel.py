"""Notebook 04b's exercise: compute a Megatron-style tensor-parallel MLP from its shards, as the ranks would.

The MLP is ``gelu(x @ w1.T + b1) @ w2.T + b2``. Tensor parallel over `n` ranks splits ``w1`` (and ``b1``)
by rows, its output features: **column-parallel**, rank ``i`` computes its own slice of the hidden layer,
and GeLU, which works element by element, needs nothing from the others. ``w2`` is split by columns, its
input features: **row-parallel**, rank ``i`` multiplies its hidden slice by its columns and gets a *partial*
output of full size. One all-reduce (a sum) of the partials gives the output; ``b2`` is added once.

A learner's function ``tp_mlp(x, w1_shards, b1_shards, w2_shards, b2)`` gets the shards as lists (one entry
per rank) and returns the output; summing the partials stands for the all-reduce. `check_tensor_parallel_mlp`
runs it for 1, 2 and 4 ranks against the unsplit MLP and names the classic slips.

Example:
    >>> import torch
    >>> def tp_mlp(x, w1_shards, b1_shards, w2_shards, b2):
    ...     partials = [
    ...         torch.nn.functional.gelu(x @ w1.T + b1) @ w2.T
    ...         for w1, b1, w2 in zip(w1_shards, b1_shards, w2_shards)
    ...     ]
    ...     return sum(partials) + b2  # the all-reduce, then the bias once
    >>> check_tensor_parallel_mlp(tp_mlp)
    'tp_mlp matches the unsplit MLP on 1, 2 and 4 ranks (within 1e-05)'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional

from workbench.exercises.mismatch import ExerciseMismatch
from workbench.exercises.waiting import waits_for_learner

TOLERANCE = 1e-5
_HINT = (
    "each rank: its hidden slice gelu(x @ w1_i.T + b1_i), then its partial output slice @ w2_i.T; sum the "
    "partials (the all-reduce) and add b2 once"
)


def split_mlp(
    w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, ranks: int
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """Each rank's shards: ``w1``'s rows and ``b1`` (column-parallel), ``w2``'s columns (row-parallel).

    Example (an 8 → 16 → 4 MLP on 2 ranks):
        >>> w1s, b1s, w2s = split_mlp(torch.randn(16, 8), torch.randn(16), torch.randn(4, 16), ranks=2)
        >>> [tuple(w.shape) for w in w1s], [tuple(b.shape) for b in b1s], [tuple(w.shape) for w in w2s]
        ([(8, 8), (8, 8)], [(8,), (8,)], [(4, 8), (4, 8)])
    """
    return list(w1.chunk(ranks, 0)), list(b1.chunk(ranks, 0)), list(w2.chunk(ranks, 1))


@waits_for_learner
def check_tensor_parallel_mlp(tp_mlp: Callable[..., Any]) -> str:
    """Run ``tp_mlp`` on 1, 2 and 4 ranks' shards of a seeded MLP (8 → 16 → 4, batch 5) against the whole."""
    name = getattr(tp_mlp, "__name__", "tp_mlp")
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(5, 8, generator=generator)
    w1, b1 = torch.randn(16, 8, generator=generator), torch.randn(16, generator=generator)
    w2, b2 = torch.randn(4, 16, generator=generator), torch.randn(4, generator=generator)
    want = functional.gelu(x @ w1.T + b1) @ w2.T + b2
    for ranks in (1, 2, 4):
        shards = split_mlp(w1, b1, w2, ranks)
        got = tp_mlp(x, *shards, b2)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise ExerciseMismatch(
                f"{name} returned {shape} on {_ranks(ranks)}; the MLP's output is {tuple(want.shape)} "
                f"(batch × outputs): each rank's partial is already full size. Hint: {_HINT}"
            )
        error = float((got - want).abs().max())
        if error > TOLERANCE:
            raise ExerciseMismatch(
                f"{name} differs from the unsplit MLP by {error:.3g} on {_ranks(ranks)}"
                f"{_diagnose(got, x, w1, b1, w2, b2, ranks)}. Hint: {_HINT}"
            )
    return f"{name} matches the unsplit MLP on 1, 2 and 4 ranks (within {TOLERANCE:g})"


def _diagnose(got, x, w1, b1, w2, b2, ranks: int) -> str:
    """Name the slip when the output is one of the usual wrong answers."""
    hidden = x @ w1.T + b1
    slips = {
        "b2 added on every rank (add it once, after the all-reduce)": functional.gelu(hidden) @ w2.T
        + ranks * b2,
        "the partials averaged instead of summed": functional.gelu(hidden) @ w2.T / ranks + b2,
        "GeLU after the all-reduce (it belongs to each rank's hidden slice)": functional.gelu(hidden @ w2.T)
        + b2,
    }
    for slip, wrong in slips.items():
        if torch.allclose(got, wrong, atol=TOLERANCE, rtol=0):
            return f": {slip}"
    return ""


def _ranks(count: int) -> str:
    return f"{count} rank" if count == 1 else f"{count} ranks"
