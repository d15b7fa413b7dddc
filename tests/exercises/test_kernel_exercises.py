"""Notebook 01's "write the kernel" checks: the reference solutions pass, and each classic slip is caught
with the element or the thread it went wrong at (numba's simulator here, the GPU where there is one)."""

import pytest

from workbench.exercises import ExerciseMismatch
from workbench.exercises.kernels import check_block_sum, check_map, check_outer_add, check_tiled_matmul
from workbench.kernels._numba import load_cuda

cuda = load_cuda()  # configures numba (the simulator without a GPU) before anything imports it
from numba import float32  # noqa: E402

THREADS, TILE = 16, 4


@cuda.jit
def add_ten(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + 10


@cuda.jit
def add_ten_unguarded(x, out):
    i = cuda.grid(1)
    out[i] = x[i] + 10


@cuda.jit
def add_one(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + 1


@cuda.jit
def outer_add(a, b, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = a[i] + b[j]


@cuda.jit
def outer_add_first_axis_guarded(a, b, out):
    i, j = cuda.grid(2)
    if i < out.shape[0]:
        out[i, j] = a[i] + b[j]


@cuda.jit
def block_sum(x, out):
    cache = cuda.shared.array(THREADS, float32)
    t, i = cuda.threadIdx.x, cuda.grid(1)
    cache[t] = x[i] if i < x.size else 0
    cuda.syncthreads()
    stride = THREADS // 2
    while stride > 0:
        if t < stride:
            cache[t] += cache[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        out[cuda.blockIdx.x] = cache[0]


@cuda.jit
def block_sum_first_element_only(x, out):
    cache = cuda.shared.array(THREADS, float32)
    t, i = cuda.threadIdx.x, cuda.grid(1)
    cache[t] = x[i] if i < x.size else 0
    cuda.syncthreads()
    if t == 0:
        out[cuda.blockIdx.x] = cache[0]


@cuda.jit
def tiled_matmul(a, b, out):
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row, col = cuda.grid(2)
    acc = float32(0)
    for t in range((a.shape[1] + TILE - 1) // TILE):
        k = t * TILE + ty
        sa[tx, ty] = a[row, k] if row < a.shape[0] and k < a.shape[1] else 0
        k = t * TILE + tx
        sb[tx, ty] = b[k, col] if k < b.shape[0] and col < b.shape[1] else 0
        cuda.syncthreads()
        for q in range(TILE):
            acc += sa[tx, q] * sb[q, ty]
        cuda.syncthreads()
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = acc


@cuda.jit
def tiled_matmul_whole_tiles_only(a, b, out):
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row, col = cuda.grid(2)
    acc = float32(0)
    for t in range(a.shape[1] // TILE):  # drops the last, partial tile along k
        k = t * TILE + ty
        sa[tx, ty] = a[row, k] if row < a.shape[0] else 0
        k = t * TILE + tx
        sb[tx, ty] = b[k, col] if col < b.shape[1] else 0
        cuda.syncthreads()
        for q in range(TILE):
            acc += sa[tx, q] * sb[q, ty]
        cuda.syncthreads()
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = acc


def test_the_reference_kernels_pass():
    assert "matches the spec on 100 elements" in check_map(add_ten)
    assert "13 × 9" in check_outer_add(outer_add)
    assert "5 blocks of 16 threads" in check_block_sum(block_sum)
    assert "(9 × 7) @ (7 × 5)" in check_tiled_matmul(tiled_matmul)


@pytest.mark.parametrize(
    ("check", "kernel", "message"),
    [
        (check_map, add_ten_unguarded, r"add_ten_unguarded failed in thread \(\d+, 0, 0\) of block \(3,"),
        (check_map, add_one, r"out\[0\] is -49, the spec says -40 \(x\[0\] \+ 10\); 100 of 100 elements"),
        (check_outer_add, outer_add_first_axis_guarded, r"failed in thread .*out of bounds.*past the end"),
        (check_block_sum, block_sum_first_element_only, r"out\[0\] is 1, the spec says 59 \(sum of x\[0:16"),
        (check_tiled_matmul, tiled_matmul_whole_tiles_only, r"out\[0, 0\] is .*row 0 of a · column 0 of b"),
        (check_map, lambda x, out: None, "is not a CUDA kernel: decorate it with @cuda.jit"),
    ],
)
def test_each_slip_is_named_where_it_goes_wrong(check, kernel, message):
    with pytest.raises(ExerciseMismatch, match=message):
        check(kernel)
