"""Notebook 01's "write the kernel" checks: the reference solutions pass, and each classic slip is caught
with the element or the thread it went wrong at (numba's simulator here, the GPU where there is one)."""

import pytest

from workbench.exercises import ExerciseMismatch
from workbench.exercises.kernels import (
    check_axis_sum,
    check_block_sum,
    check_conv1d,
    check_dot,
    check_map,
    check_outer_add,
    check_pool,
    check_prefix_sum,
    check_tiled_matmul,
    check_zip,
)
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


DOT_THREADS, PREFIX_THREADS, AXIS_THREADS = 32, 16, 16  # threads per block of dot, prefix_sum, axis_sum


@cuda.jit
def zip_add(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


@cuda.jit
def pool3(x, out):
    i = cuda.grid(1)
    if i < out.size:
        total = x[i]
        if i >= 1:
            total += x[i - 1]
        if i >= 2:
            total += x[i - 2]
        out[i] = total


@cuda.jit
def dot(a, b, out):
    products = cuda.shared.array(DOT_THREADS, float32)
    t = cuda.threadIdx.x
    products[t] = a[t] * b[t] if t < a.size else 0
    cuda.syncthreads()
    stride = DOT_THREADS // 2
    while stride > 0:  # block_sum's tree, on the products
        if t < stride:
            products[t] += products[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        out[0] = products[0]


@cuda.jit
def conv1d(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        total = float32(0)
        for j in range(b.size):
            if i + j < a.size:  # past a's end counts 0
                total += a[i + j] * b[j]
        out[i] = total


@cuda.jit
def prefix_sum(x, out):
    running = cuda.shared.array(PREFIX_THREADS, float32)
    t = cuda.threadIdx.x
    running[t] = x[t] if t < x.size else 0
    cuda.syncthreads()
    stride = 1
    while stride < PREFIX_THREADS:
        left = running[t - stride] if t >= stride else float32(0)
        cuda.syncthreads()  # every thread has read before any writes
        running[t] += left
        cuda.syncthreads()
        stride *= 2
    if t < out.size:
        out[t] = running[t]


@cuda.jit
def axis_sum(x, out):
    partial = cuda.shared.array(AXIS_THREADS, float32)
    row, t = cuda.blockIdx.x, cuda.threadIdx.x
    total = float32(0)
    for column in range(t, x.shape[1], AXIS_THREADS):  # 20 columns, 16 threads: some take two
        total += x[row, column]
    partial[t] = total
    cuda.syncthreads()
    stride = AXIS_THREADS // 2
    while stride > 0:
        if t < stride:
            partial[t] += partial[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        out[row] = partial[0]


@cuda.jit
def zip_add_twice_a(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + a[i]


@cuda.jit
def pool3_wrapping_at_the_start(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i - 2] + x[i - 1] + x[i]  # index -1 is the last element, not 0


@cuda.jit
def dot_without_the_sum(a, b, out):
    t = cuda.threadIdx.x
    out[0] = a[t] * b[t]  # every thread writes its own product: the last one wins


@cuda.jit
def conv1d_unguarded(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        total = float32(0)
        for j in range(b.size):
            total += a[i + j] * b[j]
        out[i] = total


@cuda.jit
def prefix_sum_one_round(x, out):
    running = cuda.shared.array(PREFIX_THREADS, float32)
    t = cuda.threadIdx.x
    running[t] = x[t] if t < x.size else 0
    cuda.syncthreads()
    left = running[t - 1] if t >= 1 else float32(0)
    cuda.syncthreads()
    running[t] += left
    if t < out.size:
        out[t] = running[t]


@cuda.jit
def axis_sum_first_sixteen_columns(x, out):
    partial = cuda.shared.array(AXIS_THREADS, float32)
    row, t = cuda.blockIdx.x, cuda.threadIdx.x
    partial[t] = x[row, t]
    cuda.syncthreads()
    if t == 0:
        total = float32(0)
        for k in range(AXIS_THREADS):
            total += partial[k]
        out[row] = total


def test_the_reference_kernels_pass():
    assert "matches the spec on 100 elements" in check_map(add_ten)
    assert "13 × 9" in check_outer_add(outer_add)
    assert "5 blocks of 16 threads" in check_block_sum(block_sum)
    assert "(9 × 7) @ (7 × 5)" in check_tiled_matmul(tiled_matmul)
    assert "100 pairs" in check_zip(zip_add)
    assert "the first two windows are short" in check_pool(pool3)
    assert "a · b on 32 elements in one block" in check_dot(dot)
    assert "40 outputs of 4 taps" in check_conv1d(conv1d)
    assert "running sum of 13 elements" in check_prefix_sum(prefix_sum)
    assert "row sums of 5 × 20" in check_axis_sum(axis_sum)


@pytest.mark.parametrize(
    ("check", "kernel", "message"),
    [
        (check_map, add_ten_unguarded, r"add_ten_unguarded failed in thread \(\d+, 0, 0\) of block \(3,"),
        (check_map, add_one, r"out\[0\] is -49, the spec says -40 \(x\[0\] \+ 10\); 100 of 100 elements"),
        (check_outer_add, outer_add_first_axis_guarded, r"failed in thread .*out of bounds.*past the end"),
        (check_block_sum, block_sum_first_element_only, r"out\[0\] is 1, the spec says 59 \(sum of x\[0:16"),
        (check_tiled_matmul, tiled_matmul_whole_tiles_only, r"out\[0, 0\] is .*row 0 of a · column 0 of b"),
        (check_map, lambda x, out: None, "is not a CUDA kernel: decorate it with @cuda.jit"),
        (
            check_zip,
            zip_add_twice_a,
            r"out\[0\] is 0, the spec says 198 \(a\[0\] \+ b\[0\]\); 99 of 100 .* = a\[i\] \+ b\[i\]",
        ),
        (check_pool, pool3_wrapping_at_the_start, r"out\[0\] is \d+, the spec says 1 \(x\[0:1\] summed\)"),
        (check_dot, dot_without_the_sum, r"out\[0\] is \d+, the spec says \d+ \(Σ a\[i\]·b\[i\]\)"),
        (check_conv1d, conv1d_unguarded, r"conv1d_unguarded failed in thread .*past the end"),
        (
            check_prefix_sum,
            prefix_sum_one_round,
            r"out\[2\] is \d+, the spec says \d+ \(x\[0\] \+ … \+ x\[2\]\)",
        ),
        (
            check_axis_sum,
            axis_sum_first_sixteen_columns,
            r"out\[0\] is \d+, the spec says \d+ \(the sum of row 0\)",
        ),
    ],
)
def test_each_slip_is_named_where_it_goes_wrong(check, kernel, message):
    with pytest.raises(ExerciseMismatch, match=message):
        check(kernel)
