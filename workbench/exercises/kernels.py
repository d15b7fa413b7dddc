"""Notebook 01's exercises: write small CUDA kernels yourself (numba.cuda), each checked against a NumPy spec.

As in GPU-Puzzles, every check launches the learner's kernel with a fixed grid on seeded inputs (on the GPU
when there is one, else on numba's simulator), compares every output element with the spec, and raises
`ExerciseMismatch` naming the first wrong element, or the thread that failed, with a hint. The launches
have more threads than elements on purpose: a kernel must guard its index. On the simulator a read or write
past an array's end raises in the thread that made it; on a GPU the output is followed by a canary region
that must stay untouched.

=================  ==========================================================  ==============================
check              the kernel the learner writes                               launch
=================  ==========================================================  ==============================
`check_map`        ``add_ten(x, out)``: ``out[i] = x[i] + 10``                 100 elements, 4 blocks × 32
`check_outer_add`  ``outer_add(a, b, out)``: ``out[i, j] = a[i] + b[j]``       13 × 9, 2 × 2 blocks of 8 × 8
`check_block_sum`  ``block_sum(x, out)``: ``out[b]`` = the sum of block b's     70 elements, 5 blocks × 16
                   elements, added up in shared memory
`check_tiled_...`  ``tiled_matmul(a, b, out)``: ``out = a @ b`` through         (9 × 7) @ (7 × 5), 4 × 4 tiles
                   ``TILE × TILE`` tiles staged in shared memory
=================  ==========================================================  ==============================

Example (the simulator on a CPU machine):
    >>> from workbench.kernels._numba import load_cuda
    >>> cuda = load_cuda()
    >>> @cuda.jit
    ... def add_ten(x, out):
    ...     i = cuda.grid(1)
    ...     out[i] = x[i] + 10  # no guard: the 4th block runs past the end
    >>> check_map(add_ten)
    Traceback (most recent call last):
    ...
    workbench.exercises.mismatch.ExerciseMismatch: add_ten failed in thread ... of block (3, 0, 0): ...
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from workbench.exercises.mismatch import ExerciseMismatch
from workbench.kernels._numba import load_cuda

CANARY = -12345.0  # fills the region after a GPU output: any other value there was written past the end
BLOCK_SUM_THREADS = 16  # threads per block of `check_block_sum` (the kernel's shared array has this size)
MATMUL_TILE = 4  # tile of `check_tiled_matmul`: blocks of TILE × TILE threads, tiles of TILE × TILE floats

_GUARD_HINT = "the grid has more threads than elements: return (or skip) when the index is past the end"


def check_map(kernel: Callable[..., Any]) -> str:
    """``add_ten(x, out)``: every thread ``i = cuda.grid(1)`` writes ``out[i] = x[i] + 10``."""
    x = np.arange(100, dtype=np.float32) * 3 - 50
    out = _launch(kernel, (4,), (32,), [x], (100,))
    _compare(kernel, out, x + 10, lambda i: f"x{list(i)} + 10", _GUARD_HINT)
    return f"{_name(kernel)} matches the spec on 100 elements (128 threads: the guard works)"


def check_outer_add(kernel: Callable[..., Any]) -> str:
    """``outer_add(a, b, out)``: a 2-D grid, ``i, j = cuda.grid(2)``, ``out[i, j] = a[i] + b[j]``."""
    a, b = np.arange(13, dtype=np.float32) * 10, np.arange(9, dtype=np.float32)
    out = _launch(kernel, (2, 2), (8, 8), [a, b], (13, 9))
    hint = "cuda.grid(2) gives (x, y): x runs along out's first axis here; guard both against out.shape"
    _compare(kernel, out, a[:, None] + b[None, :], lambda i: f"a[{i[0]}] + b[{i[1]}]", hint)
    return f"{_name(kernel)} matches the spec on 13 × 9 (a 16 × 16 grid of threads)"


def check_block_sum(kernel: Callable[..., Any]) -> str:
    """``block_sum(x, out)``: block ``b`` sums ``x[b*16 : (b+1)*16]`` (past the end counts 0) into ``out[b]``.

    The expected shape: each thread loads its element (or 0) into a shared array of `BLOCK_SUM_THREADS`,
    then the block halves the active threads each round (``stride`` 8, 4, 2, 1: thread ``t < stride``
    adds element ``t + stride`` to ``t``), with ``cuda.syncthreads()`` between rounds; thread 0 writes.
    """
    x = np.arange(70, dtype=np.float32) % 7 + 1  # small integers: float sums are exact in any order
    out = _launch(kernel, (5,), (BLOCK_SUM_THREADS,), [x], (5,))
    want = np.array([x[b * 16 : (b + 1) * 16].sum() for b in range(5)], dtype=np.float32)
    hint = (
        "load x[i] (0 past the end) into the shared array, cuda.syncthreads(), then for stride 8, 4, 2, 1: "
        "threads t < stride add element t + stride, cuda.syncthreads() after each round; thread 0 writes"
    )
    _compare(kernel, out, want, lambda i: f"sum of x[{16 * i[0]}:{min(70, 16 * i[0] + 16)}]", hint)
    blocks = f"5 blocks of {BLOCK_SUM_THREADS} threads"
    return f"{_name(kernel)} matches the spec: {blocks}, the last one partly past the end"


def check_tiled_matmul(kernel: Callable[..., Any]) -> str:
    """``tiled_matmul(a, b, out)``: ``out = a @ b``, each block computing a `MATMUL_TILE` square of ``out``
    through tiles of ``a`` and ``b`` staged in shared memory (zeros past the edges)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((9, 7)).astype(np.float32)
    b = rng.standard_normal((7, 5)).astype(np.float32)
    tile = MATMUL_TILE
    grid = (math.ceil(9 / tile), math.ceil(5 / tile))
    out = _launch(kernel, grid, (tile, tile), [a, b], (9, 5))
    hint = (
        f"for each of the ceil(7 / {tile}) tiles along k: load a[row, t*{tile} + ty] and "
        f"b[t*{tile} + tx, col] (0 past an edge) into shared tiles, cuda.syncthreads(), add the tile's "
        "products, cuda.syncthreads() again before the next tile overwrites them; write inside out only"
    )
    _compare(kernel, out, a @ b, lambda i: f"row {i[0]} of a · column {i[1]} of b", hint, tolerance=1e-4)
    return f"{_name(kernel)} matches a @ b on (9 × 7) @ (7 × 5) with {tile} × {tile} tiles (edges included)"


def _launch(
    kernel: Callable[..., Any],
    grid: tuple[int, ...],
    block: tuple[int, ...],
    inputs: list[np.ndarray],
    shape: tuple[int, ...],
) -> np.ndarray:
    """Run ``kernel[grid, block](*inputs, out)``; return ``out`` (float32 of `shape`, NaN where unwritten)."""
    cuda = load_cuda()
    name = _name(kernel)
    if not hasattr(kernel, "__getitem__"):
        raise ExerciseMismatch(f"{name} is not a CUDA kernel: decorate it with @cuda.jit")
    size = math.prod(shape)
    room = np.full(size + 64, CANARY, dtype=np.float32)  # the output, then the canary region
    room[:size] = np.nan
    device_room = cuda.to_device(room)
    device_inputs = [cuda.to_device(x) for x in inputs]
    try:
        kernel[grid, block](*device_inputs, device_room[:size].reshape(shape))
        cuda.synchronize()
    except Exception as error:  # the simulator names the thread; a GPU compile error names the line
        raise ExerciseMismatch(_describe_failure(name, error)) from None
    room = device_room.copy_to_host()
    if not np.all(room[size:] == CANARY):
        raise ExerciseMismatch(f"{name} wrote past the end of out: {_GUARD_HINT}")
    return room[:size].reshape(shape)


def _describe_failure(name: str, error: BaseException) -> str:
    message = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
    found = re.search(r"tid=\[(\d+), (\d+), (\d+)\] ctaid=\[(\d+), (\d+), (\d+)\]:?\s*(.*)", str(error))
    if found:
        thread, block = found.group(1, 2, 3), found.group(4, 5, 6)
        where = f"in thread ({', '.join(thread)}) of block ({', '.join(block)})"
        message = found.group(7)
        hint = f"; {_GUARD_HINT}" if isinstance(error, IndexError) else ""
        return f"{name} failed {where}: {type(error).__name__}: {message}{hint}"
    return f"{name} failed: {type(error).__name__}: {message}"


def _compare(
    kernel: Callable[..., Any],
    got: np.ndarray,
    want: np.ndarray,
    spec: Callable[[tuple[int, ...]], str],
    hint: str,
    *,
    tolerance: float = 0.0,
) -> None:
    wrong = ~np.isclose(got, want, rtol=tolerance, atol=tolerance) | np.isnan(got)
    if not wrong.any():
        return
    index = tuple(int(i) for i in np.argwhere(wrong)[0])
    value = "never written" if np.isnan(got[index]) else f"{float(got[index]):g}"
    where = f"out[{', '.join(map(str, index))}]"
    raise ExerciseMismatch(
        f"{_name(kernel)}: {where} is {value}, the spec says {float(want[index]):g} ({spec(index)}); "
        f"{int(wrong.sum())} of {wrong.size} elements differ. Hint: {hint}"
    )


def _name(kernel: Callable[..., Any]) -> str:
    function = getattr(kernel, "py_func", kernel)  # numba's dispatcher keeps the Python function
    return getattr(function, "__name__", "the kernel")
