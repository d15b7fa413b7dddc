"""Matrix multiply on the GPU four ways: one thread per output, shared-memory tiles, register blocking, and
register blocking with 128-bit loads.

    c = matmul(a, b)                         # register-blocked (the default): 8×8 outputs per thread
    c = matmul(a, b, method="vector")        # the same tiles, every access 4 floats wide
    c = matmul(a, b, method="tiled")         # 16×16 tiles staged in shared memory
    dw = matmul(dy, x, transpose_a=True)     # dyᵀ @ x, reading dy transposed (nothing is materialised)

fp32 in, fp32 out, any shapes: edge tiles are bounds-checked. `matmul_spec` is the NumPy definition the
tests compare against. Kernels are built on first use for each (method, transposes, block, per_thread).

What each method costs in global memory (M×K @ K×N):

- naive: every thread reads a row of A and a column of B: 2K reads per output;
- tiled (T×T tiles): each element loaded into shared memory serves T outputs: 2K/T reads per output;
- register (T×T threads, R×R outputs each, tiles of TR×D): 2K/(TR) reads per output, and each value read
  from shared memory into a register serves R multiply-adds (`workbench.kernels.register_tile`);
- vector: as register with R = 8, each load, shared read and store moving 4 floats, and no bounds work in
  the loop over k (`workbench.kernels.vector_tile`); it needs sizes that are multiples of 4 and 16-byte
  aligned operands, and runs the register kernel on others.
"""

from __future__ import annotations

import math
from functools import cache, partial
from typing import Any

import numpy as np
import torch

from workbench._validate import check_choice, check_int
from workbench.kernels._numba import as_buffer, bind_cuda, empty, launch, multiprocessors, on_simulator
from workbench.kernels.register_tile import BLOCKS_PER_SM, loads_per_thread, register_kernel
from workbench.kernels.targets import F32_2D, KernelTarget
from workbench.kernels.vector_tile import BLOCKS_PER_SM as VECTOR_BLOCKS_PER_SM
from workbench.kernels.vector_tile import (
    GPU_THREADS,
    PER_THREAD,
    THREAD_CHOICES,
    tile_of,
    vector_kernel,
    vector_ready,
    vector_threads,
)

METHODS = ("register", "vector", "tiled", "naive")
# block = threads per side of a block; per_thread = outputs per side of a thread (register method).
GPU_DEFAULTS = {"naive": (16, None), "tiled": (16, None), "register": (16, 8), "vector": (16, None)}
SIMULATOR_DEFAULTS = {"naive": (16, None), "tiled": (8, None), "register": (4, 4), "vector": (4, None)}
# Rows of c run along grid x (up to 2³¹ - 1 blocks); columns along grid y, whose limit is 65,535 blocks:
# wider matrices loop over column tiles (a grid-stride loop), so any shape launches.
MAX_GRID_Y = 65_535
# The register method keeps up to 8×8 accumulators per thread: ptxas gives it up to 255 registers, so a
# block of at most 256 threads (16×16) is launchable whatever it gets (256 × 255 < 65,536 registers per SM).
REGISTER_MAX_BLOCK = 16
POWERS_OF_TWO = (1, 2, 4, 8, 16)

cuda: Any = None  # numba.cuda, bound on the first launch (importing this module imports no numba)


def matmul_spec(a: Any, b: Any, *, transpose_a: bool = False, transpose_b: bool = False) -> np.ndarray:
    """The reference: ``op(a) @ op(b)`` in float64, ``op`` transposing where asked.

    Example:
        >>> matmul_spec(np.ones((2, 3)), np.ones((2, 3)), transpose_b=True)
        array([[3., 3.],
               [3., 3.]])
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a.T if transpose_a else a) @ (b.T if transpose_b else b)


def matmul(
    a: Any,
    b: Any,
    *,
    method: str = "register",
    transpose_a: bool = False,
    transpose_b: bool = False,
    block: int | None = None,
    per_thread: int | None = None,
) -> Any:
    """``op(a) @ op(b)`` in fp32 on the GPU (or numba's simulator), ``op`` transposing where asked.

    On torch tensors that require grad (with grad enabled) the product joins autograd like ``a @ b``: its
    backward is two more of these matmuls, reading the operands transposed in place.

    Args:
        a: (M, K) float32, or (K, M) with ``transpose_a``; a torch tensor, NumPy array or device array.
        b: (K, N) float32, or (N, K) with ``transpose_b``.
        method: ``"register"`` (default), ``"vector"``, ``"tiled"`` or ``"naive"``.
        transpose_a, transpose_b: multiply by the transpose, read in place.
        block: threads per side of a block (and the tile edge); default 16 on a GPU, smaller on the simulator.
            ``"register"``: a power of two up to 16 (more threads could not launch with its registers);
            ``"vector"``: 2, 4, 8 or 16 (tiles of 8·block; on a GPU by default 16, or 8 when 128×128 tiles
            would leave SMs idle).
        per_thread: ``"register"`` only: each thread computes per_thread × per_thread outputs, 1, 2, 4 or 8
            (default 8 on a GPU: 128×128 tiles; 4 on the simulator).

    Returns:
        (M, N) float32 of the kind of `a`: a torch tensor on its device, a NumPy array or a device array.

    Raises:
        ValueError: unknown method, bad block/per_thread, inner dimensions that differ, or a bad operand.
        TypeError: an operand that is not float32 (or not an array).

    Example:
        >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
        >>> matmul(a, a, transpose_b=True, method="tiled")
        array([[ 5., 14.],
               [14., 50.]], dtype=float32)
    """
    options = {"method": method, "block": block, "per_thread": per_thread}
    if _records_graph(a, b):
        return _MatmulFunction.apply(a, b, bool(transpose_a), bool(transpose_b), options)
    return _matmul(a, b, (transpose_a, transpose_b), options)


def _records_graph(a: Any, b: Any) -> bool:
    """Whether ``a @ b`` would join torch's autograd graph: tensors, one requiring grad, grad enabled."""
    tensors = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    return tensors and torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)


class _MatmulFunction(torch.autograd.Function):
    """``c = op(a) @ op(b)``; backward ``d op(a) = dc @ op(b)ᵀ``, ``d op(b) = op(a)ᵀ @ dc``, each a matmul."""

    @staticmethod
    def forward(ctx: Any, a: Any, b: Any, transpose_a: bool, transpose_b: bool, options: dict) -> Any:
        ctx.save_for_backward(a, b)
        ctx.transposes, ctx.options = (transpose_a, transpose_b), options
        return _matmul(a, b, (transpose_a, transpose_b), options)

    @staticmethod
    def backward(ctx: Any, dc: Any) -> tuple[Any, ...]:
        a, b = ctx.saved_tensors
        (ta, tb), options, dc = ctx.transposes, ctx.options, dc.contiguous()  # autograd may hand a view
        da = db = None
        if ctx.needs_input_grad[0]:  # a is (M, K): dc @ op(b)ᵀ; a is (K, M): op(b) @ dcᵀ
            da = _matmul(b, dc, (tb, True), options) if ta else _matmul(dc, b, (False, not tb), options)
        if ctx.needs_input_grad[1]:  # b is (K, N): op(a)ᵀ @ dc; b is (N, K): dcᵀ @ op(a)
            db = _matmul(dc, a, (True, ta), options) if tb else _matmul(a, dc, (not ta, False), options)
        return da, db, None, None, None


def _matmul(a: Any, b: Any, transposes: tuple[bool, bool], options: dict[str, Any]) -> Any:
    """`matmul` without autograd: `options` holds its method, block and per_thread."""
    (transpose_a, transpose_b), method = transposes, options["method"]
    block, per_thread = options["block"], options["per_thread"]
    check_choice("method", method, METHODS)
    chosen_block = block
    block, per_thread = _launch_sizes(method, block, per_thread)
    transpose_a, transpose_b = bool(transpose_a), bool(transpose_b)
    a_buf, b_buf = as_buffer(a, "a", ndim=2), as_buffer(b, "b", ndim=2)
    m, k = a_buf.shape[::-1] if transpose_a else a_buf.shape
    k_b, n = b_buf.shape[::-1] if transpose_b else b_buf.shape
    if k != k_b:
        op_a, op_b = "aᵀ" if transpose_a else "a", "bᵀ" if transpose_b else "b"
        raise ValueError(
            f"inner dimensions differ: {op_a} is {m}×{k} (a.shape {a_buf.shape}), {op_b} is {k_b}×{n} "
            f"(b.shape {b_buf.shape}); op(a) @ op(b) needs op(a).shape[1] == op(b).shape[0]"
        )
    c_buf = empty((m, n), like=a_buf)
    stream = a_buf.stream()
    args = (a_buf, b_buf, c_buf)
    if method == "naive":
        kernel = _naive_kernel(transpose_a, transpose_b)
        # grid (ceil(M/T), ≤ ceil(N/T)), block (T, T), thread x along columns; each thread: 2K global
        # reads, 1 write per output
        launch(kernel, grid_2d(m, n, block), (block, block), stream, *args)
    elif method == "tiled":
        kernel = _tiled_kernel(transpose_a, transpose_b, block)
        # grid (ceil(M/T), ≤ ceil(N/T)), block (T, T); shared 2·T·(T+1) floats; each thread: 2·ceil(K/T)
        # global reads (one element of each tile), 2K shared reads, 1 write per output
        launch(kernel, grid_2d(m, n, block), (block, block), stream, *args)
    elif method == "vector":
        if chosen_block is None and not on_simulator():  # 64×64 tiles for outputs too small to fill the GPU
            block = vector_threads(m, n, multiprocessors())
        if vector_ready(m, n, k, (a_buf.address, b_buf.address, c_buf.address)):
            kernel, side, tile = vector_kernel(transpose_a, transpose_b, block), block, tile_of(block)
        else:  # sizes or addresses 128-bit accesses cannot take: the register kernel (its defaults, or block)
            side, per = (block, PER_THREAD) if chosen_block else _launch_sizes("register", None, None)
            kernel, tile = register_kernel(transpose_a, transpose_b, side, per), side * per
        # grid (ceil(M/8T), ≤ ceil(N/8T)), block (T, T); shared 2·8·(8T+4) floats; each thread per slab of
        # depth 8: 16/T 128-bit global loads per operand, per k 4 128-bit shared reads and 64 multiply-adds
        launch(kernel, grid_2d(m, n, tile), (side, side), stream, *args)
    else:
        kernel = register_kernel(transpose_a, transpose_b, block, per_thread)
        # grid (ceil(M/TR), ≤ ceil(N/TR)), block (T, T); shared 2·D·(TR+4) floats (D = min(8, T²));
        # each thread: 2·(TR·D/T²)·ceil(K/D) global reads, 2RK shared reads, R²K multiply-adds, R² writes
        launch(kernel, grid_2d(m, n, block * per_thread), (block, block), stream, *args)
    return c_buf.result()


def grid_2d(rows: int, cols: int, tile: int) -> tuple[int, int]:
    """Blocks along x (row tiles, all of them) and y (column tiles, at most `MAX_GRID_Y`: the kernels loop
    over the rest), for an output of `rows` × `cols` in `tile` × `tile` tiles.

    Example:
        >>> grid_2d(2_000_000, 3_000_000, 16)
        (125000, 65535)
    """
    return math.ceil(rows / tile), min(math.ceil(cols / tile), MAX_GRID_Y)


def _launch_sizes(method: str, block: int | None, per_thread: int | None) -> tuple[int, int | None]:
    default_block, default_per_thread = (SIMULATOR_DEFAULTS if on_simulator() else GPU_DEFAULTS)[method]
    block = default_block if block is None else block
    ok = isinstance(block, int) and not isinstance(block, bool) and 1 <= block <= 32
    if not ok:
        raise ValueError(f"block must be an integer from 1 to 32 (block² threads ≤ 1024), got {block!r}")
    if method == "vector":
        if per_thread is not None:
            raise ValueError(
                f"method='vector' computes {PER_THREAD}×{PER_THREAD} outputs per thread; pass no per_thread"
            )
        if block not in THREAD_CHOICES:
            raise ValueError(
                f"method='vector' takes block in {', '.join(map(str, THREAD_CHOICES))}, got {block}"
            )
        return block, None
    if method != "register":
        if per_thread is not None:
            raise ValueError(f"per_thread applies to method='register' only, not method={method!r}")
        return block, None
    per_thread = default_per_thread if per_thread is None else per_thread
    check_int("per_thread", per_thread, minimum=1)
    if per_thread > 8:
        raise ValueError(
            f"per_thread must be at most 8 (per_thread² accumulators per thread), got {per_thread}"
        )
    if block > REGISTER_MAX_BLOCK:
        raise ValueError(
            f"block={block} gives {block * block} threads, each holding per_thread² accumulators in "
            f"registers: a GPU cannot launch more than {REGISTER_MAX_BLOCK * REGISTER_MAX_BLOCK} such "
            f"threads per block (up to 255 registers each, 65,536 per SM); use block ≤ {REGISTER_MAX_BLOCK}"
        )
    if block not in POWERS_OF_TWO or per_thread not in POWERS_OF_TWO:
        raise ValueError(
            f"method='register' tiles by powers of two: block in 1, 2, 4, 8, 16 and per_thread in 1, 2, 4, "
            f"8; got block={block}, per_thread={per_thread}"
        )
    if loads_per_thread(block, per_thread) < 1:
        raise ValueError(
            f"block={block} with per_thread={per_thread} leaves some of the {block * block} threads nothing "
            f"to load per step; use per_thread ≥ {per_thread * 2}"
        )
    return block, per_thread


@cache
def _naive_kernel(transpose_a: bool, transpose_b: bool) -> Any:
    bind_cuda(globals())
    from numba import float32

    @cuda.jit
    def naive(a, b, c):
        m, n = c.shape
        k_total = a.shape[0] if transpose_a else a.shape[1]
        row = cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y
        # grid y may hold fewer column tiles than there are: step over the rest
        for col in range(
            cuda.blockIdx.y * cuda.blockDim.x + cuda.threadIdx.x, n, cuda.gridDim.y * cuda.blockDim.x
        ):
            if row < m:
                acc = float32(0)
                for k in range(k_total):
                    a_value = a[k, row] if transpose_a else a[row, k]
                    b_value = b[col, k] if transpose_b else b[k, col]
                    acc += a_value * b_value
                c[row, col] = acc

    return naive


@cache
def _tiled_kernel(transpose_a: bool, transpose_b: bool, tile: int) -> Any:
    bind_cuda(globals())
    from numba import float32

    padded = tile + 1  # shared-array shapes must be compile-time constants: computed out here

    @cuda.jit
    def tiled(a, b, c):
        m, n = c.shape
        k_total = a.shape[0] if transpose_a else a.shape[1]
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row0 = cuda.blockIdx.x * tile
        row = row0 + ty
        # +1 column: transposed loads write a column, which would otherwise hit one shared-memory bank
        a_tile = cuda.shared.array((tile, padded), float32)  # a_tile[i, k] = op(a)[row0 + i, k0 + k]
        b_tile = cuda.shared.array((tile, padded), float32)  # b_tile[k, j] = op(b)[k0 + k, col0 + j]
        # grid y may hold fewer column tiles than there are: the block steps over the rest
        for col0 in range(cuda.blockIdx.y * tile, n, cuda.gridDim.y * tile):
            col = col0 + tx
            acc = float32(0)
            for k0 in range(0, k_total, tile):
                # neighbouring threads (tx) read neighbouring addresses of the stored matrix: coalesced
                value = float32(0)
                if transpose_a:  # a is stored (K, M)
                    if k0 + ty < k_total and row0 + tx < m:
                        value = a[k0 + ty, row0 + tx]
                    a_tile[tx, ty] = value
                else:
                    if row < m and k0 + tx < k_total:
                        value = a[row, k0 + tx]
                    a_tile[ty, tx] = value
                value = float32(0)
                if transpose_b:  # b is stored (N, K)
                    if col0 + ty < n and k0 + tx < k_total:
                        value = b[col0 + ty, k0 + tx]
                    b_tile[tx, ty] = value
                else:
                    if k0 + ty < k_total and col < n:
                        value = b[k0 + ty, col]
                    b_tile[ty, tx] = value
                cuda.syncthreads()
                for k in range(tile):
                    acc += a_tile[ty, k] * b_tile[k, tx]
                cuda.syncthreads()
            if row < m and col < n:
                c[row, col] = acc

    return tiled


def gpu_targets() -> list[KernelTarget]:
    """The matmul kernels as `matmul` launches them on a GPU (its defaults), in every transposed form."""
    operands = f"({F32_2D}, {F32_2D}, {F32_2D})"  # a, b, c: contiguous device views
    block, per_thread = GPU_DEFAULTS["register"]
    targets = []
    for transpose_a, transpose_b in ((False, False), (True, False), (False, True), (True, True)):
        form = "".join("t" if t else "n" for t in (transpose_a, transpose_b))
        suffix = "" if form == "nn" else f" {form}"
        naive, tiled = GPU_DEFAULTS["naive"][0], GPU_DEFAULTS["tiled"][0]
        builds = {  # the kernel, threads per side of the block, resident blocks per SM counted on
            "naive": (partial(_naive_kernel, transpose_a, transpose_b), naive, 4),
            "tiled": (partial(_tiled_kernel, transpose_a, transpose_b, tiled), tiled, 4),
            "register": (
                partial(register_kernel, transpose_a, transpose_b, block, per_thread),
                block,
                BLOCKS_PER_SM,
            ),
        }
        for threads in GPU_THREADS:  # 128×128 tiles ("matmul vector"), 64×64 for small outputs
            label = (
                "vector"
                if threads == GPU_DEFAULTS["vector"][0]
                else f"vector {tile_of(threads)}×{tile_of(threads)}"
            )
            build = partial(vector_kernel, transpose_a, transpose_b, threads)
            builds[label] = (build, threads, VECTOR_BLOCKS_PER_SM)
        for method, (build, side, blocks_per_sm) in builds.items():
            name = f"matmul {method}{suffix}"
            targets.append(KernelTarget(name, build, operands, side * side, blocks_per_sm))
    return targets
