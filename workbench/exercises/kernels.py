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
`check_zip`        ``zip_add(a, b, out)``: ``out[i] = a[i] + b[i]``            100 elements, 4 blocks × 32
`check_pool`       ``pool3(x, out)``: ``out[i] = x[i-2] + x[i-1] + x[i]``      50 elements, 2 blocks × 32
                   (terms before the start count 0)
`check_dot`        ``dot(a, b, out)``: ``out[0] = Σ a[i]·b[i]``, one block,    32 elements, 1 block × 32
                   in shared memory
`check_conv1d`     ``conv1d(a, b, out)``: ``out[i] = Σ_j a[i+j]·b[j]``         40 and 4 elements, 2 × 32
                   (``a`` past its end counts 0)
`check_prefix_sum` ``prefix_sum(x, out)``: ``out[i] = x[0] + … + x[i]``, one    13 elements, 1 block × 16
                   block, in shared memory
`check_axis_sum`   ``axis_sum(x, out)``: ``out[r]`` = the sum of row ``r``,     5 × 20, 5 blocks × 16
                   one block per row, 16 threads for 20 columns
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
from workbench.exercises.waiting import YourTurn, waits_for_learner
from workbench.kernels._numba import load_cuda

CANARY = -12345.0  # fills the region after a GPU output: any other value there was written past the end
BLOCK_SUM_THREADS = 16  # threads per block of `check_block_sum` (the kernel's shared array has this size)
MATMUL_TILE = 4  # tile of `check_tiled_matmul`: blocks of TILE × TILE threads, tiles of TILE × TILE floats
DOT_THREADS = 32  # `check_dot`: one block of this many threads, one element each
PREFIX_THREADS = 16  # `check_prefix_sum`: one block of this many threads for 13 elements
AXIS_THREADS = 16  # `check_axis_sum`: threads per block, one block per row of 20

_GUARD_HINT = "the grid has more threads than elements: return (or skip) when the index is past the end"


@waits_for_learner
def check_map(kernel: Callable[..., Any]) -> str:
    """``add_ten(x, out)``: every thread ``i = cuda.grid(1)`` writes ``out[i] = x[i] + 10``."""
    x = np.arange(100, dtype=np.float32) * 3 - 50
    out = _launch(kernel, (4,), (32,), [x], (100,))
    _compare(kernel, out, x + 10, lambda i: f"x{list(i)} + 10", _GUARD_HINT)
    return f"{_name(kernel)} matches the spec on 100 elements (128 threads: the guard works)"


@waits_for_learner
def check_outer_add(kernel: Callable[..., Any]) -> str:
    """``outer_add(a, b, out)``: a 2-D grid, ``i, j = cuda.grid(2)``, ``out[i, j] = a[i] + b[j]``.

    Example (a slip, and what the check says of it):
        >>> cuda = load_cuda()
        >>> @cuda.jit
        ... def outer_add(a, b, out):
        ...     i, j = cuda.grid(2)
        ...     if i < out.shape[0] and j < out.shape[1]:
        ...         out[i, j] = a[i] - b[j]
        >>> try:
        ...     check_outer_add(outer_add)
        ... except ExerciseMismatch as slip:
        ...     print(slip)
        outer_add: out[0, 1] is -1, the spec says 1 (a[0] + b[1]); 104 of 117 elements differ. Hint: ...
    """
    a, b = np.arange(13, dtype=np.float32) * 10, np.arange(9, dtype=np.float32)
    out = _launch(kernel, (2, 2), (8, 8), [a, b], (13, 9))
    hint = "cuda.grid(2) gives (x, y): x runs along out's first axis here; guard both against out.shape"
    _compare(kernel, out, a[:, None] + b[None, :], lambda i: f"a[{i[0]}] + b[{i[1]}]", hint)
    return f"{_name(kernel)} matches the spec on 13 × 9 (a 16 × 16 grid of threads)"


@waits_for_learner
def check_block_sum(kernel: Callable[..., Any]) -> str:
    """``block_sum(x, out)``: block ``b`` sums ``x[b*16 : (b+1)*16]`` (past the end counts 0) into ``out[b]``.

    The expected shape: each thread loads its element (or 0) into a shared array of `BLOCK_SUM_THREADS`,
    then the block halves the active threads each round (``stride`` 8, 4, 2, 1: thread ``t < stride``
    adds element ``t + stride`` to ``t``), with ``cuda.syncthreads()`` between rounds; thread 0 writes.

    Example (a slip, and what the check says of it):
        >>> cuda = load_cuda()
        >>> @cuda.jit
        ... def block_sum(x, out):
        ...     if cuda.threadIdx.x == 0:  # thread 0 alone, without the block's sum
        ...         out[cuda.blockIdx.x] = x[cuda.grid(1)]
        >>> try:
        ...     check_block_sum(block_sum)
        ... except ExerciseMismatch as slip:
        ...     print(slip)
        block_sum: out[0] is 1, the spec says 59 (sum of x[0:16]); 5 of 5 elements differ. Hint: ...
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


@waits_for_learner
def check_tiled_matmul(kernel: Callable[..., Any]) -> str:
    """``tiled_matmul(a, b, out)``: ``out = a @ b``, each block computing a `MATMUL_TILE` square of ``out``
    through tiles of ``a`` and ``b`` staged in shared memory (zeros past the edges).

    Example (a slip, and what the check says of it):
        >>> cuda = load_cuda()
        >>> @cuda.jit
        ... def tiled_matmul(a, b, out):
        ...     row, col = cuda.grid(2)
        ...     if row < out.shape[0] and col < out.shape[1]:
        ...         out[row, col] = a[row, 0] * b[0, col]  # the first product of 7
        >>> try:
        ...     check_tiled_matmul(tiled_matmul)
        ... except ExerciseMismatch as slip:
        ...     print(slip)
        tiled_matmul: out[0, 0] is -0.062351, the spec says -1.18403 (row 0 of a · column 0 of b); ...
    """
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


@waits_for_learner
def check_zip(kernel: Callable[..., Any]) -> str:
    """``zip_add(a, b, out)``: ``out[i] = a[i] + b[i]``, one thread per element.

    Example (a slip, and what the check says of it):
        >>> cuda = load_cuda()
        >>> @cuda.jit
        ... def zip_add(a, b, out):
        ...     i = cuda.grid(1)
        ...     if i < out.size:
        ...         out[i] = a[i] + a[i]
        >>> try:
        ...     check_zip(zip_add)
        ... except ExerciseMismatch as slip:
        ...     print(slip)
        zip_add: out[0] is 0, the spec says 198 (a[0] + b[0]); 99 of 100 elements differ. Hint: ...
    """
    a, b = np.arange(100, dtype=np.float32), np.arange(100, dtype=np.float32)[::-1] * 2
    out = _launch(kernel, (4,), (32,), [a, np.ascontiguousarray(b)], (100,))
    hint = f"out[i] = a[i] + b[i], the same i in both; {_GUARD_HINT}"
    _compare(kernel, out, a + b, lambda i: f"a[{i[0]}] + b[{i[0]}]", hint)
    return f"{_name(kernel)} matches the spec on 100 pairs (128 threads)"


@waits_for_learner
def check_pool(kernel: Callable[..., Any]) -> str:
    """``pool3(x, out)``: ``out[i]`` = the sum of ``x[i-2], x[i-1], x[i]`` (before the start counts 0).

    Example (a slip, and what the check says of it):
        >>> cuda = load_cuda()
        >>> @cuda.jit
        ... def pool3(x, out):
        ...     i = cuda.grid(1)
        ...     if i < out.size:
        ...         out[i] = x[i] + (x[i - 1] if i >= 1 else 0)  # two terms of three
        >>> try:
        ...     check_pool(pool3)
        ... except ExerciseMismatch as slip:
        ...     print(slip)
        pool3: out[2] is 5, the spec says 6 (x[0:3] summed); 48 of 50 elements differ. Hint: ...
    """
    x = np.arange(50, dtype=np.float32) % 9 + 1
    out = _launch(kernel, (2,), (32,), [x], (50,))
    want = np.array([x[max(0, i - 2) : i + 1].sum() for i in range(50)], dtype=np.float32)
    hint = "sum x[i - 2], x[i - 1] and x[i], skipping the indices below 0; guard i against out.size"
    _compare(kernel, out, want, lambda i: f"x[{max(0, i[0] - 2)}:{i[0] + 1}] summed", hint)
    return f"{_name(kernel)} matches the spec on 50 elements (the first two windows are short)"


@waits_for_learner
def check_dot(kernel: Callable[..., Any]) -> str:
    """``dot(a, b, out)``: one block of `DOT_THREADS`; ``out[0] = Σ a[i]·b[i]``, the products summed in shared
    memory (each thread stores its product, then a tree of halving strides, or thread 0 adds them).

    Example (a slip, and what the check says of it):
        >>> cuda = load_cuda()
        >>> @cuda.jit
        ... def dot(a, b, out):
        ...     if cuda.threadIdx.x == 0:
        ...         out[0] = a[0] * b[0]  # one product, not their sum
        >>> try:
        ...     check_dot(dot)
        ... except ExerciseMismatch as slip:
        ...     print(slip)
        dot: out[0] is 0, the spec says 122 (Σ a[i]·b[i]); 1 of 1 elements differ. Hint: ...
    """
    a = np.arange(DOT_THREADS, dtype=np.float32) % 5
    b = np.arange(DOT_THREADS, dtype=np.float32) % 3 + 1  # small integers: exact in any order
    out = _launch(kernel, (1,), (DOT_THREADS,), [a, b], (1,))
    hint = (
        "each thread stores a[i] * b[i] in a shared array of DOT_THREADS floats, cuda.syncthreads(), then "
        "the products are added up (halving strides with a cuda.syncthreads() per round) and thread 0 writes"
    )
    _compare(kernel, out, np.array([a @ b], dtype=np.float32), lambda i: "Σ a[i]·b[i]", hint)
    return f"{_name(kernel)} matches a · b on {DOT_THREADS} elements in one block"


@waits_for_learner
def check_conv1d(kernel: Callable[..., Any]) -> str:
    """``conv1d(a, b, out)``: ``out[i] = Σ_j a[i + j]·b[j]`` over the 4 taps of ``b``; ``a`` past its end
    counts 0 (what deep-learning libraries call a convolution is this correlation).

    Example (a slip, and what the check says of it):
        >>> cuda = load_cuda()
        >>> @cuda.jit
        ... def conv1d(a, b, out):
        ...     i = cuda.grid(1)
        ...     if i < out.size:
        ...         out[i] = a[i] * b[0]  # the first tap of 4
        >>> try:
        ...     check_conv1d(conv1d)
        ... except ExerciseMismatch as slip:
        ...     print(slip)
        conv1d: out[0] is 0, the spec says 9 (Σ_j a[0 + j]·b[j]); 39 of 40 elements differ. Hint: ...
    """
    a = np.arange(40, dtype=np.float32) % 7
    b = np.array([1, 2, -1, 3], dtype=np.float32)
    out = _launch(kernel, (2,), (32,), [a, b], (40,))
    padded = np.concatenate([a, np.zeros(3, dtype=np.float32)])
    want = np.array([padded[i : i + 4] @ b for i in range(40)], dtype=np.float32)
    hint = "loop j over b.size: add a[i + j] * b[j] only while i + j < a.size; guard i against out.size"
    _compare(kernel, out, want, lambda i: f"Σ_j a[{i[0]} + j]·b[j]", hint)
    return f"{_name(kernel)} matches the spec: 40 outputs of 4 taps, the last 3 running past a's end"


@waits_for_learner
def check_prefix_sum(kernel: Callable[..., Any]) -> str:
    """``prefix_sum(x, out)``: one block of `PREFIX_THREADS`; ``out[i] = x[0] + … + x[i]`` for the 13
    elements, scanned in shared memory (Hillis–Steele: for stride 1, 2, 4, 8 each thread adds the value
    `stride` to its left, reading before anyone writes).

    Example (a slip, and what the check says of it):
        >>> cuda = load_cuda()
        >>> @cuda.jit
        ... def prefix_sum(x, out):
        ...     t = cuda.threadIdx.x
        ...     if t < out.size:
        ...         out[t] = x[t]  # a copy: no running sum yet
        >>> try:
        ...     check_prefix_sum(prefix_sum)
        ... except ExerciseMismatch as slip:
        ...     print(slip)
        prefix_sum: out[1] is 2, the spec says 3 (x[0] + … + x[1]); 12 of 13 elements differ. Hint: ...
    """
    x = np.arange(13, dtype=np.float32) % 4 + 1
    out = _launch(kernel, (1,), (PREFIX_THREADS,), [x], (13,))
    hint = (
        "load x (0 past the end) into shared memory; for stride 1, 2, 4, 8: read the value stride to the "
        "left into a local, cuda.syncthreads(), add it, cuda.syncthreads(); then write the first 13"
    )
    _compare(kernel, out, np.cumsum(x), lambda i: f"x[0] + … + x[{i[0]}]", hint)
    return f"{_name(kernel)} matches the running sum of 13 elements in one block of {PREFIX_THREADS}"


@waits_for_learner
def check_axis_sum(kernel: Callable[..., Any]) -> str:
    """``axis_sum(x, out)``: block ``r`` sums row ``r`` of the 5 × 20 ``x`` into ``out[r]`` with
    `AXIS_THREADS` threads: each adds every 16th element of the row from its own, then the block adds up.

    Example (a slip, and what the check says of it):
        >>> cuda = load_cuda()
        >>> @cuda.jit
        ... def axis_sum(x, out):
        ...     if cuda.threadIdx.x == 0:
        ...         out[cuda.blockIdx.x] = x[cuda.blockIdx.x, 0]  # the row's first element only
        >>> try:
        ...     check_axis_sum(axis_sum)
        ... except ExerciseMismatch as slip:
        ...     print(slip)
        axis_sum: out[0] is 0, the spec says 46 (the sum of row 0); 5 of 5 elements differ. Hint: ...
    """
    x = (np.arange(100, dtype=np.float32) % 6).reshape(5, 20)
    out = _launch(kernel, (5,), (AXIS_THREADS,), [x], (5,))
    hint = (
        "row r = cuda.blockIdx.x; thread t adds x[r, t], x[r, t + 16], … (20 columns, 16 threads) into a "
        "shared array, cuda.syncthreads(), the block adds those up, thread 0 writes out[r]"
    )
    _compare(kernel, out, x.sum(axis=1), lambda i: f"the sum of row {i[0]}", hint)
    return f"{_name(kernel)} matches the row sums of 5 × 20 with {AXIS_THREADS} threads per row"


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
    except YourTurn:  # a stub of the learner's: "not attempted yet", not a mismatch
        raise
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
