"""Softmax cross-entropy over rows of logits: forward (mean loss) and backward (d loss / d logits).

    loss, lse = softmax_cross_entropy(logits, targets)           # lse: log Σ exp, per row (saved stats)
    dlogits = softmax_cross_entropy_backward(logits, targets, lse, grad_out=1.0)

Forward: one block per row. The block finds the row's max (a tree in shared memory), then Σ exp(x - max)
(another tree), so ``lse = max + log Σ exp(x - max)`` never overflows; thread 0 adds the row's loss
``lse - x[target]``, divided by N, to the mean with one atomic add. Backward: one thread per element,
``(exp(x - lse) - [j == target]) · grad_out / N`` — softmax recomputed from the saved lse, so forward keeps
N floats instead of N×C probabilities.

Targets are int32/int64 class indices, checked on the host before the launch (one small read for device
arrays).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np
import torch

from workbench.kernels._numba import (
    GPU_THREADS,
    INDEX_DTYPES,
    Buffer,
    as_buffer,
    bind_cuda,
    check_power_of_two,
    empty,
    full,
    launch,
    launch_1d,
    on_simulator,
    scalar_result,
    zeros,
)
from workbench.kernels.targets import F32_1D, F32_2D, KernelTarget

cuda: Any = None  # numba.cuda, bound on the first launch (importing this module imports no numba)

GPU_MAX_THREADS, SIMULATOR_MAX_THREADS = 256, 1  # per row (fewer for fewer classes); see `launch`


def softmax_cross_entropy_spec(logits: Any, targets: Any) -> tuple[float, np.ndarray]:
    """The reference in float64: (mean loss, softmax probabilities).

    Example:
        >>> loss, probs = softmax_cross_entropy_spec([[0.0, 0.0]], [1])
        >>> round(loss, 4), probs.tolist()
        (0.6931, [[0.5, 0.5]])
    """
    x = np.asarray(logits, np.float64)
    t = np.asarray(targets, np.int64)
    shifted = x - x.max(axis=1, keepdims=True)
    lse = np.log(np.exp(shifted).sum(axis=1))
    loss = float(np.mean(lse - shifted[np.arange(len(t)), t]))
    return loss, np.exp(shifted - lse[:, None])


def softmax_cross_entropy_backward_spec(logits: Any, targets: Any, grad_out: float = 1.0) -> np.ndarray:
    """The reference in float64: (softmax - onehot) · grad_out / N.

    Example:
        >>> softmax_cross_entropy_backward_spec([[0.0, 0.0]], [1]).tolist()
        [[0.5, -0.5]]
    """
    _, probs = softmax_cross_entropy_spec(logits, targets)
    t = np.asarray(targets, np.int64)
    probs[np.arange(len(t)), t] -= 1
    return probs * grad_out / len(t)


def softmax_cross_entropy(logits: Any, targets: Any, *, threads: int | None = None) -> tuple[Any, Any]:
    """Mean cross-entropy of softmax(logits) against class indices, and each row's log-sum-exp.

    Args:
        logits: (N, C) float32 (torch tensor, NumPy array or device array).
        targets: (N,) int32 or int64 class indices in [0, C).
        threads: threads per row, a power of two (default: enough for C, at most 256; 1 on the simulator,
            where each block costs a Python thread per CUDA thread).

    Returns:
        (loss, lse): the mean loss as a 0-d float32 tensor/array (a 1-element device array for device
        arrays), and the (N,) float32 log Σ exp of each row, which the backward pass takes.

    Raises:
        ValueError: bad shapes, a target outside [0, C), or a bad `threads`.
        TypeError: logits not float32, targets not int32/int64.

    Example:
        >>> logits = np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]], np.float32)
        >>> loss, lse = softmax_cross_entropy(logits, np.array([0, 2]))
        >>> round(float(loss), 4), lse.round(4)
        (0.6691, array([2.2395, 1.0986], dtype=float32))
    """
    x, t = check_operands(logits, targets)
    n, c = x.shape
    threads = _row_threads(c, threads)
    loss, lse = zeros((1,), like=x), empty((n,), like=x)
    # grid N (one block per row), block `threads`; shared `threads` floats; each thread: 2·ceil(C/threads)
    # global reads and exps, 2·log2(threads) shared-memory steps; thread 0: 1 read of x[target], 1 write of
    # lse, 1 atomic add to the mean
    inv_n = np.float32(1 / n)
    launch(
        _forward_kernel(threads), n, threads, x.stream(), x.device, t.device, lse.device, loss.device, inv_n
    )
    return scalar_result(loss), lse.result()


def softmax_cross_entropy_backward(
    logits: Any,
    targets: Any,
    lse: Any,
    grad_out: Any = 1.0,
    *,
    threads: int | None = None,
    blocks: int | None = None,
) -> Any:
    """d(mean loss)/d(logits) · grad_out = (softmax(logits) - onehot(targets)) · grad_out / N.

    Args:
        logits, targets: as given to `softmax_cross_entropy`.
        lse: the (N,) log-sum-exp it returned.
        grad_out: the gradient of the final result with respect to the loss: a number, or a 1-element
            float32 array (read on the device, e.g. autograd's grad_output).
        threads, blocks: the launch (defaults as `workbench.kernels.reduce.sum`).

    Returns:
        (N, C) float32 of the kind of `logits`.

    Example:
        >>> logits = np.zeros((2, 2), np.float32)
        >>> _, lse = softmax_cross_entropy(logits, np.array([0, 1]))
        >>> softmax_cross_entropy_backward(logits, np.array([0, 1]), lse)
        array([[-0.25,  0.25],
               [ 0.25, -0.25]], dtype=float32)
    """
    x, t = check_operands(logits, targets)
    lse_buffer = as_buffer(lse, "lse", ndim=1)
    if lse_buffer.shape != (x.shape[0],):
        raise ValueError(
            f"lse has shape {lse_buffer.shape} but logits has shape {x.shape}; lse needs ({x.shape[0]},)"
        )
    if isinstance(grad_out, int | float) and not isinstance(grad_out, bool):
        g = full((1,), float(grad_out), like=x)
    else:
        g = as_buffer(grad_out, "grad_out")
        if g.size != 1:
            raise ValueError(f"grad_out must be a number or hold one element, got shape {g.shape}")
        g = g.flat()
    return backward(x, t, lse_buffer, g, threads=threads, blocks=blocks)


def backward(
    x: Buffer,
    t: Buffer,
    lse: Buffer,
    grad_out: Buffer,
    *,
    threads: int | None = None,
    blocks: int | None = None,
) -> Any:
    """`softmax_cross_entropy_backward` on checked buffers (autograd's path: no second target check)."""
    n, c = x.shape
    dlogits = empty((n, c), like=x)
    blocks, threads = launch_1d(n * c, threads, blocks)
    # grid `blocks`, block `threads`, grid-stride over N·C; each element: reads x, lse[row], target[row],
    # grad_out; 1 exp; 1 write
    launch(
        _backward_kernel(),
        blocks,
        threads,
        x.stream(),
        x.device,
        t.device,
        lse.device,
        grad_out.device,
        np.float32(1 / n),
        dlogits.device,
    )
    return dlogits.result()


def check_operands(logits: Any, targets: Any) -> tuple[Buffer, Buffer]:
    """Checked (logits, targets) buffers; targets are read on the host and must lie in [0, C)."""
    x = as_buffer(logits, "logits", ndim=2)
    t = as_buffer(targets, "targets", dtypes=INDEX_DTYPES, ndim=1)
    n, c = x.shape
    if t.shape != (n,):
        raise ValueError(f"targets has shape {t.shape} but logits has shape {x.shape}; targets needs ({n},)")
    low, high = _target_range(t)
    if low < 0 or high >= c:
        bad = low if low < 0 else high
        raise ValueError(
            f"targets must be class indices in [0, {c}) for logits of shape {x.shape}; got {bad}"
        )
    return x, t


def _target_range(t: Buffer) -> tuple[int, int]:
    if t.kind == "torch":
        extremes = torch.aminmax(t.host.detach())
        return int(extremes.min), int(extremes.max)
    values = t.host if t.kind == "numpy" else t.device.copy_to_host()
    return int(values.min()), int(values.max())


def _row_threads(classes: int, threads: int | None) -> int:
    if threads is not None:
        return check_power_of_two("threads", threads)
    most = SIMULATOR_MAX_THREADS if on_simulator() else GPU_MAX_THREADS
    return min(most, 1 << max(0, math.ceil(math.log2(classes))))


@cache
def _forward_kernel(threads: int) -> Any:
    bind_cuda(globals())
    from numba import float32

    @cuda.jit
    def forward(logits, targets, lse, loss, inv_n):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        classes = logits.shape[1]
        scratch = cuda.shared.array(threads, float32)
        # 1. the row's max: a strided max per thread, then a tree over the block
        value = float32(-math.inf)
        for j in range(tid, classes, threads):
            value = max(value, logits[row, j])
        scratch[tid] = value
        cuda.syncthreads()
        step = threads // 2
        while step > 0:
            if tid < step:
                scratch[tid] = max(scratch[tid], scratch[tid + step])
            cuda.syncthreads()
            step //= 2
        row_max = scratch[0]
        cuda.syncthreads()  # all have read scratch[0] before it is overwritten
        # 2. Σ exp(x - max): the same, with sums
        value = float32(0)
        for j in range(tid, classes, threads):
            value += math.exp(logits[row, j] - row_max)
        scratch[tid] = value
        cuda.syncthreads()
        step = threads // 2
        while step > 0:
            if tid < step:
                scratch[tid] += scratch[tid + step]
            cuda.syncthreads()
            step //= 2
        if tid == 0:
            row_lse = row_max + math.log(scratch[0])
            lse[row] = row_lse
            cuda.atomic.add(loss, 0, (row_lse - logits[row, targets[row]]) * inv_n)

    return forward


@cache
def _backward_kernel() -> Any:
    bind_cuda(globals())
    from numba import float32

    @cuda.jit
    def backward(logits, targets, lse, grad_out, inv_n, dlogits):
        classes = logits.shape[1]
        scale = grad_out[0] * inv_n
        for index in range(cuda.grid(1), logits.size, cuda.gridsize(1)):
            row = index // classes
            col = index - row * classes
            p = math.exp(logits[row, col] - lse[row])
            if col == targets[row]:
                p -= float32(1)
            dlogits[row, col] = p * scale

    return backward


def gpu_targets() -> list[KernelTarget]:
    """Cross-entropy forward (one block of up to 256 threads per row) and backward, for both target types."""
    targets = []
    for index in INDEX_DTYPES:
        forward = f"({F32_2D}, {index}[::1], {F32_1D}, {F32_1D}, float32)"
        backward = f"({F32_2D}, {index}[::1], {F32_1D}, {F32_1D}, float32, {F32_2D})"
        targets += [
            KernelTarget(
                f"xent forward {index}", lambda: _forward_kernel(GPU_MAX_THREADS), forward, GPU_MAX_THREADS, 4
            ),
            KernelTarget(f"xent backward {index}", _backward_kernel, backward, GPU_THREADS, 4),
        ]
    return targets
