"""FSDP's all-gathers and reduce-scatters, timed where this rank waits for them (the step-time breakdown).

FSDP2 lets a strategy give each unit the functions that run its collectives (``FSDPModule.
set_custom_all_gather`` / ``set_custom_reduce_scatter``). `TimedAllGather` and `TimedReduceScatter` run the
same calls torch's defaults make (``dist.all_gather_single``, ``dist.reduce_scatter_single``) and add the
seconds of each synchronous call to a `CollectiveTimes`. On CPU (gloo) FSDP calls them synchronously: the
rank waits the whole call, so it is all exposed communication, none overlapped. On GPUs the calls only
enqueue NCCL work on FSDP's own streams (their host time is not the communication's), so the strategy keeps
torch's defaults there and the breakdown says the collectives stay inside forward and backward.

torch 2.11 has neither ``*_single`` function (its FSDP calls ``dist.all_gather_into_tensor`` and
``dist.reduce_scatter_tensor``, the same collectives): `all_gather_call` and `reduce_scatter_call` pick
whichever this torch has.

Example:
    >>> times = CollectiveTimes()
    >>> times.add(0.002); times.add(0.001)
    >>> round(times.take(), 6), times.take(), times.calls
    (0.003, 0.0, 2)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist


def all_gather_call() -> Any:
    """``dist.all_gather_single`` where torch has it (2.12+), else ``dist.all_gather_into_tensor`` (2.11)."""
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def reduce_scatter_call() -> Any:
    """``dist.reduce_scatter_single`` where torch has it (2.12+), else ``reduce_scatter_tensor`` (2.11)."""
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class CollectiveTimes:
    """Seconds spent in timed collective calls since the last `take`."""

    def __init__(self) -> None:
        self._seconds = 0.0
        self.calls = 0

    def add(self, seconds: float) -> None:
        self._seconds += seconds
        self.calls += 1

    def take(self) -> float:
        """The seconds since the previous `take`, and start counting again."""
        seconds, self._seconds = self._seconds, 0.0
        return seconds


class _TimedComm:
    """Plain buffers (as torch's default comms allocate them) and the timing of synchronous calls."""

    def __init__(self, times: CollectiveTimes) -> None:
        self.times = times

    def allocate(self, size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(size, dtype=dtype, device=device)

    def _timed(self, call: Any, async_op: bool) -> Any:
        started = time.perf_counter()
        work = call()
        if not async_op:  # an asynchronous call's wait happens elsewhere: it stays where it is waited for
            self.times.add(time.perf_counter() - started)
        return work


class TimedAllGather(_TimedComm):
    """FSDP's all-gather (``dist.all_gather_single``), timed."""

    def __call__(
        self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any, async_op: bool = False
    ) -> Any:
        return self._timed(
            lambda: all_gather_call()(output_tensor, input_tensor, group=group, async_op=async_op),
            async_op,
        )


class TimedReduceScatter(_TimedComm):
    """FSDP's reduce-scatter (``dist.reduce_scatter_single``), timed."""

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: Any,
        op: Any,
        async_op: bool = False,
    ) -> Any:
        return self._timed(
            lambda: reduce_scatter_call()(output_tensor, input_tensor, op=op, group=group, async_op=async_op),
            async_op,
        )
