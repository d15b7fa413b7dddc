"""Sums of long vectors: each thread adds a strided slice, each block a tree in shared memory, one atomic.

    total = sum(x)                 # Python float
    norm2 = squared_norm(x)        # Σ x², the square of the L2 norm

One pass over `x` (any shape, read as flat): every thread accumulates in float32 over a grid-stride loop,
`LOADS_IN_FLIGHT` elements a block-width apart per round, each into its own sum (independent loads, so a
warp keeps that many memory requests in flight; on an H100 a profile timed the kernel on 100M floats at
130.5 µs against torch's 138.4, 2026-11-27: what held `sum` at a third of the bandwidth was the host), the
block halves its partial sums in shared memory down to one warp's 32, the first warp adds those with five
register-to-register shuffles (``shfl_down_sync``: no shared memory, no block barrier), and thread 0 adds
the block's sum to the result with one atomic add. Blocks under 32 threads (the simulator's default 8) halve
in shared memory to the end. The result is read back to the host as a Python float (so each call waits
for the GPU); `accumulate_into` leaves it on the device for callers that chain kernels (gradient clipping).
Atomics make the order of the block sums, and so the last bits of the result, vary between runs.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np

from workbench.kernels._numba import (
    ALL_LANES,
    GPU_THREADS,
    WARP,
    Buffer,
    as_buffer,
    bind_cuda,
    launch,
    launch_1d,
    read_scalar,
    zeros,
)
from workbench.kernels.targets import F32_1D, KernelTarget

cuda: Any = None  # numba.cuda, bound on the first launch (importing this module imports no numba)

LOADS_IN_FLIGHT = 8  # elements each thread loads, into separate sums, per grid-stride round


def sum_spec(x: Any) -> float:
    """The reference: Σ x in float64.

    Example:
        >>> sum_spec(np.arange(4, dtype=np.float32))
        6.0
    """
    return float(np.sum(np.asarray(x, np.float64)))


def squared_norm_spec(x: Any) -> float:
    """The reference: Σ x² in float64.

    Example:
        >>> squared_norm_spec([3.0, 4.0])
        25.0
    """
    x = np.asarray(x, np.float64)
    return float(np.dot(x.ravel(), x.ravel()))


def sum(x: Any, *, threads: int | None = None, blocks: int | None = None) -> float:
    """Σ x over every element of a float32 array, as a Python float.

    Args:
        x: float32 torch tensor, NumPy array or device array, any shape, contiguous, not empty.
        threads: threads per block, a power of two (default 256 on a GPU, 8 on the simulator).
        blocks: blocks in the grid (default: enough to cover x, at most 32 per SM; 2 on the simulator).

    Example:
        >>> sum(np.arange(1000, dtype=np.float32))
        499500.0
    """
    return _reduce(x, square=False, threads=threads, blocks=blocks)


def squared_norm(x: Any, *, threads: int | None = None, blocks: int | None = None) -> float:
    """Σ x² over every element of a float32 array, as a Python float (the squared L2 norm).

    Args:
        x: float32 torch tensor, NumPy array or device array, any shape, contiguous, not empty.
        threads, blocks: the launch, as for `sum`.

    Example:
        >>> squared_norm(np.full(1025, 2, dtype=np.float32))
        4100.0
    """
    return _reduce(x, square=True, threads=threads, blocks=blocks)


def _reduce(x: Any, *, square: bool, threads: int | None, blocks: int | None) -> float:
    buffer = as_buffer(x, "x").flat()
    out = zeros((1,), like=buffer)
    accumulate_into(out, buffer, square=square, threads=threads, blocks=blocks)
    return read_scalar(out)


def accumulate_into(
    out: Buffer, x: Buffer, *, square: bool, threads: int | None = None, blocks: int | None = None
) -> None:
    """Add Σ x (or Σ x²) of the flat buffer `x` to ``out[0]`` on the device, without waiting for it."""
    blocks, threads = launch_1d(math.ceil(x.size / LOADS_IN_FLIGHT), threads, blocks)
    kernel = _reduce_kernel(threads, square)
    # grid `blocks`, block `threads`; shared `threads` floats; each thread: ceil(n / (blocks·threads))
    # global reads, LOADS_IN_FLIGHT at a time, log2(threads) shared-memory steps; thread 0 of each block:
    # 1 atomic add
    launch(kernel, blocks, threads, x.stream(), x, out)


@cache
def _reduce_kernel(threads: int, square: bool) -> Any:
    bind_cuda(globals())
    from numba import float32, uint32

    shuffles = threads >= WARP  # a whole warp to shuffle in (always on a GPU: 256 threads)
    last_shared_step = WARP if shuffles else 1

    @cuda.jit
    def reduce(x, out):
        partial = cuda.shared.array(threads, float32)
        sums = cuda.local.array(LOADS_IN_FLIGHT, float32)  # registers: every index below is a constant
        tid = cuda.threadIdx.x
        n = x.size
        tile = LOADS_IN_FLIGHT * threads
        for k in range(LOADS_IN_FLIGHT):
            sums[k] = float32(0)
        for start in range(cuda.blockIdx.x * tile + tid, n, cuda.gridDim.x * tile):
            if start + (LOADS_IN_FLIGHT - 1) * threads < n:  # a whole tile: no bound checks
                for k in range(LOADS_IN_FLIGHT):
                    value = x[start + k * threads]
                    sums[k] += value * value if square else value
            else:
                for k in range(LOADS_IN_FLIGHT):
                    i = start + k * threads
                    if i < n:
                        value = x[i]
                        sums[k] += value * value if square else value
        acc = float32(0)
        for k in range(LOADS_IN_FLIGHT):
            acc += sums[k]
        partial[tid] = acc
        cuda.syncthreads()
        step = threads // 2
        while (
            step >= last_shared_step
        ):  # tree: partial[t] += partial[t + step] for the first half, then halve
            if tid < step:
                partial[tid] += partial[tid + step]
            cuda.syncthreads()
            step //= 2
        if shuffles:
            if tid < WARP:  # the first warp: its 32 sums to lane 0 through registers
                total = partial[tid]
                offset = WARP // 2
                while offset > 0:
                    total += cuda.shfl_down_sync(uint32(ALL_LANES), total, offset)
                    offset //= 2
                if tid == 0:
                    cuda.atomic.add(out, 0, total)
        elif tid == 0:
            cuda.atomic.add(out, 0, partial[0])

    return reduce


def gpu_targets() -> list[KernelTarget]:
    """`sum` and `squared_norm` as launched on a GPU (`launch_1d`'s default threads)."""
    return [
        KernelTarget(
            name,
            lambda square=square: _reduce_kernel(GPU_THREADS, square),
            f"({F32_1D}, {F32_1D})",
            GPU_THREADS,
            4,
        )
        for name, square in (("sum", False), ("squared norm", True))
    ]
