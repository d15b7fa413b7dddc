"""Notebook 03's exercise: a ring all-reduce built from point-to-point sends, checked on live ranks.

Each of the N ranks cuts its tensor into N chunks. **Reduce-scatter**: N−1 times, every rank sends one
chunk to its right neighbour and adds the chunk arriving from its left, so that each rank ends up with
one chunk summed over all ranks. **All-gather**: N−1 more times, every rank passes a finished chunk on to
the right, until every rank has all of them. Each rank sends 2(N−1) chunks of 1/N of the tensor: 2(N−1)/N
of its bytes, whatever N, which is why NCCL and gloo use rings for large tensors.

`check_ring_all_reduce(ring_all_reduce)` runs in a ``%%ranks`` cell, on every rank at once: it gives the
learner's ``ring_all_reduce(t)`` (sum `t` over the ranks in place, with ``dist.send``/``dist.recv`` or
``dist.isend``/``dist.irecv`` only) seeded tensors, compares the result with the sum, counts the bytes this
rank sent, and names the first slip.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from workbench.exercises.mismatch import ExerciseMismatch
from workbench.exercises.waiting import waits_for_learner

_HINT = (
    "cut t into world_size chunks (t.chunk); reduce-scatter: N−1 steps of sending chunk (rank − step) % N to "
    "rank + 1 and adding the chunk (rank − step − 1) % N received from rank − 1; then all-gather: N−1 steps "
    "of passing the finished chunk (rank + 1 − step) % N on and storing chunk (rank − step) % N"
)
_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "reduce", "broadcast", "all_to_all")


@waits_for_learner
def check_ring_all_reduce(ring_all_reduce: Callable[[torch.Tensor], Any], chunk: int = 25) -> str:
    """Run on every rank: ``ring_all_reduce(t)`` on a tensor of ``chunk × world_size`` floats seeded by rank,
    against the sum over the ranks; this rank must send exactly 2(N−1)/N of the tensor's bytes."""
    name = getattr(ring_all_reduce, "__name__", "ring_all_reduce")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    size = chunk * ranks
    mine = _seeded(rank, size)
    want = sum(_seeded(r, size) for r in range(ranks))
    tensor = mine.clone()
    with _counting_sends() as sent:
        returned = ring_all_reduce(tensor)
    got = returned if isinstance(returned, torch.Tensor) and returned is not tensor else tensor
    if sent.collective:
        raise ExerciseMismatch(
            f"{name} called dist.{sent.collective} on rank {rank}: build it from dist.send/dist.recv "
            f"(or isend/irecv) only. Hint: {_HINT}"
        )
    if not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
        raise ExerciseMismatch(
            f"{name} on rank {rank} of {ranks}: {_first_wrong(got, want, mine, ranks)}. Hint: {_HINT}"
        )
    expected = 2 * (ranks - 1) * chunk * mine.element_size()
    if sent.bytes != expected:
        raise ExerciseMismatch(
            f"{name} on rank {rank} of {ranks} sent {sent.bytes:,} bytes; a ring sends 2(N−1)/N of the "
            f"tensor: 2 × {ranks - 1} chunks of {chunk} floats = {expected:,} bytes"
            + (" (were the sends made through dist.send/isend?)" if sent.bytes == 0 else "")
            + f". Hint: {_HINT}"
        )
    return (
        f"rank {rank}: {name} gives the sum over {ranks} rank(s), sending {sent.bytes:,} bytes: "
        f"2(N−1)/N = {2 * (ranks - 1) / ranks:g}× the tensor's {size * mine.element_size():,}"
    )


def _seeded(rank: int, size: int) -> torch.Tensor:
    return torch.randn(size, generator=torch.Generator().manual_seed(1000 + rank))


def _first_wrong(got: torch.Tensor, want: torch.Tensor, mine: torch.Tensor, ranks: int) -> str:
    if got.shape != want.shape:
        return f"the result has shape {tuple(got.shape)}, not {tuple(want.shape)}"
    if torch.allclose(got, mine):
        return "the tensor is unchanged: sum into t in place (or return the result)"
    pairs = zip(got.chunk(ranks), want.chunk(ranks), strict=True)
    right = [i for i, (a, b) in enumerate(pairs) if torch.allclose(a, b, rtol=1e-5, atol=1e-5)]
    if torch.allclose(got, want / ranks, rtol=1e-4, atol=1e-5):
        return "the result is the mean, not the sum"
    if len(right) == 1 and ranks > 1:
        return (
            f"only chunk {right[0]} of {ranks} holds the sum: the reduce-scatter worked, the all-gather that "
            "passes each finished chunk around is missing or wrong"
        )
    wrong = [i for i in range(ranks) if i not in right]
    return f"chunk(s) {wrong} of {ranks} differ from the sum" + (
        f" (chunk(s) {right} are right)" if right else ""
    )


class _Sends:
    def __init__(self) -> None:
        self.bytes = 0
        self.collective = ""


@contextlib.contextmanager
def _counting_sends() -> Iterator[_Sends]:
    """Count the bytes sent through dist.send / dist.isend; note a collective called instead."""
    sends = _Sends()
    saved = {name: getattr(dist, name) for name in ("send", "isend", *_COLLECTIVES)}

    def counted(original: Callable[..., Any]) -> Callable[..., Any]:
        def send(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            sends.bytes += tensor.numel() * tensor.element_size()
            return original(tensor, *args, **kwargs)

        return send

    def refused(name: str) -> Callable[..., Any]:
        def collective(*args: Any, **kwargs: Any) -> Any:
            sends.collective = sends.collective or name
            return saved[name](*args, **kwargs)

        return collective

    dist.send, dist.isend = counted(saved["send"]), counted(saved["isend"])
    for name in _COLLECTIVES:
        setattr(dist, name, refused(name))
    try:
        yield sends
    finally:
        for name, function in saved.items():
            setattr(dist, name, function)
