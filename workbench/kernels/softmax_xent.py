"""Softmax cross-entropy over rows of logits: forward (mean loss) and backward (d loss / d logits).

    loss, lse = softmax_cross_entropy(logits, targets)           # lse: log Σ exp, per row (saved stats)
    dlogits = softmax_cross_entropy_backward(logits, targets, lse, grad_out=1.0)

Forward: one block per row, one pass over it (online softmax): each thread keeps a running max m and
Σ exp(x - m), rescaling the sum when m grows; a tree in shared memory combines the threads' pairs (its
last five steps in warp shuffles when the block has whole warps), so
``lse = max + log Σ exp(x - max)`` never overflows and each logit is read once. Thread 0 adds the row's loss
``lse - x[target]``, divided by N, to the mean with one atomic add. Backward: threads along a row's classes,
the rest of the block over rows (no division to find an element's row), ``(exp(x - lse) - [j == target]) ·
grad_out / N`` — softmax recomputed from the saved lse, so forward keeps N floats instead of N×C
probabilities.

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
    ALL_LANES,
    GPU_THREADS,
    INDEX_DTYPES,
    WARP,
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
from workbench.kernels.reduce import accumulate_into
from workbench.kernels.targets import F32_1D, F32_2D, KernelTarget

cuda: Any = None  # numba.cuda, bound on the first launch (importing this module imports no numba)

GPU_MAX_THREADS, SIMULATOR_MAX_THREADS = 256, 1  # per row (fewer for fewer classes); see `launch`
LOADS_IN_FLIGHT = 8  # logits each thread loads before using any, per round over its row


def softmax_cross_entropy_spec(logits: Any, targets: Any) -> tuple[float, np.ndarray]:
    """The reference in float64: (mean loss, softmax probabilities).

    Example:
        >>> loss, probs = softmax_cross_entropy_spec([[0.0, 0.0]], [1])
        >>> round(loss, 4), probs.tolist()
        (0.6931, [[0.5, 0.5]])
    """
    x = np.asarray(logits, np.float64)
    t = np.asarray(targets, np.int64)
    with np.errstate(invalid="ignore"):  # a row of only -inf: NaN, as torch gives
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
        On torch logits that require grad (with grad enabled) the loss joins autograd (its backward is
        `softmax_cross_entropy_backward`), so ``loss.backward()`` fills ``logits.grad``.

    Raises:
        ValueError: bad shapes, a target outside [0, C), or a bad `threads`.
        TypeError: logits not float32, targets not int32/int64.

    Example:
        >>> logits = np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]], np.float32)
        >>> loss, lse = softmax_cross_entropy(logits, np.array([0, 2]))
        >>> round(float(loss), 4), lse.round(4)
        (0.6691, array([2.2395, 1.0986], dtype=float32))
    """
    tensors = isinstance(logits, torch.Tensor) and isinstance(targets, torch.Tensor)
    if tensors and logits.requires_grad and torch.is_grad_enabled():
        return CrossEntropyFunction.apply(logits, targets, threads)
    return _forward(logits, targets, threads)


def _forward(logits: Any, targets: Any, threads: int | None) -> tuple[Any, Any]:
    x, t = check_operands(logits, targets)
    n, c = x.shape
    threads = _row_threads(c, threads)
    loss, lse, row_loss = zeros((1,), like=x), empty((n,), like=x), empty((n,), like=x)
    # grid N (one block per row), block `threads`; shared 2·`threads` floats; each thread: ceil(C/threads)
    # global reads (LOADS_IN_FLIGHT at a time) and exps, log2(threads) halving steps (the last 5 in warp
    # shuffles from 32 threads up); thread 0: 1 read of x[target], 1 write of lse and of the row's loss / N,
    # which the sum kernel then adds up (one atomic per block of rows, not one per row on one address)
    inv_n = np.float32(1 / n)
    forward = _forward_kernel(threads)
    launch(forward, n, threads, x.stream(), x, t, lse, row_loss, inv_n)
    accumulate_into(loss, row_loss, square=False)
    return scalar_result(loss), lse.result()


class CrossEntropyFunction(torch.autograd.Function):
    """(loss, lse) = `softmax_cross_entropy` inside autograd: d loss / d logits by the backward kernel."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, threads: int | None = None) -> Any:
        logits, target = logits.contiguous(), target.contiguous()
        loss, lse = _forward(logits, target, threads)
        ctx.save_for_backward(logits, target, lse)
        ctx.mark_non_differentiable(lse)
        return loss, lse

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor, _grad_lse: Any) -> tuple[Any, None, None]:
        logits, target, lse = ctx.saved_tensors
        x, t = as_buffer(logits, "logits"), as_buffer(target, "target", dtypes=INDEX_DTYPES)
        g = as_buffer(grad_out.reshape(1).contiguous(), "grad_out")  # read on the device: no sync
        return backward(x, t, as_buffer(lse, "lse"), g), None, None


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
    across = min(threads, _row_threads(c, None))  # threads along a row; the rest of the block takes rows
    rows_per_block = threads // across
    # grid `blocks` (≤ one per rows_per_block rows), block (across, rows_per_block), grid-stride over the
    # rows; each element: reads x, 1 exp, 1 write; each row: reads lse[row], target[row] once
    launch(
        _backward_kernel(),
        min(blocks, math.ceil(n / rows_per_block)),
        (across, rows_per_block),
        x.stream(),
        x,
        t,
        lse,
        grad_out,
        np.float32(1 / n),
        dlogits,
    )
    return dlogits.result()


def check_operands(logits: Any, targets: Any) -> tuple[Buffer, Buffer]:
    """Checked (logits, targets) buffers; targets must lie in [0, C).

    Targets in CUDA tensors are not read on the host (that would wait for the GPU at every step): the
    kernels check them there, and a target outside [0, C) makes the loss NaN (the Trainer stops on it).
    Elsewhere (NumPy, CPU tensors on the simulator, device arrays) they are checked here, the value named.
    """
    x = as_buffer(logits, "logits", ndim=2)
    t = as_buffer(targets, "targets", dtypes=INDEX_DTYPES, ndim=1)
    n, c = x.shape
    if t.shape != (n,):
        raise ValueError(f"targets has shape {t.shape} but logits has shape {x.shape}; targets needs ({n},)")
    if t.kind == "torch" and t.host.device.type == "cuda":
        return x, t
    low, high = _target_range(t)
    if low < 0 or high >= c:
        bad = low if low < 0 else high
        raise ValueError(
            f"targets must be class indices in [0, {c}) for logits of shape {x.shape}; got {bad}"
        )
    return x, t


def _target_range(t: Buffer) -> tuple[int, int]:
    if t.kind == "torch":
        values = t.host.detach().numpy()
    else:
        values = t.host if t.kind == "numpy" else t.device.copy_to_host()
    return int(values.min()), int(values.max())


def _row_threads(classes: int, threads: int | None) -> int:
    if threads is not None:
        return check_power_of_two("threads", threads)
    most = SIMULATOR_MAX_THREADS if on_simulator() else GPU_MAX_THREADS
    least = min(most, WARP)
    return max(least, min(most, 1 << max(0, math.ceil(math.log2(classes / LOADS_IN_FLIGHT)))))


@cache
def _forward_kernel(threads: int) -> Any:
    bind_cuda(globals())
    from numba import float32, uint32

    shuffles = threads >= WARP  # whole warps: the last 32 pairs combine in registers
    last_shared_step = WARP if shuffles else 1

    @cuda.jit(device=True, inline="always")  # inlined: no separate device function to compile
    def combine(m1, s1, m2, s2):
        # (m1, s1) ⊕ (m2, s2) = (max, s1·e^(m1-max) + s2·e^(m2-max))
        top = max(m1, m2)
        if s1 != s1 or s2 != s2:  # a NaN logit in either: the row's sum is NaN
            return top, s1 + s2
        total = float32(0)
        if s1 > 0:  # an empty thread (s = 0, m = -inf) adds nothing; -inf - -inf would be NaN
            total += s1 * math.exp(m1 - top)
        if s2 > 0:
            total += s2 * math.exp(m2 - top)
        return top, total

    @cuda.jit
    def forward(logits, targets, lse, row_loss, inv_n):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        classes = logits.shape[1]
        maxima = cuda.shared.array(threads, float32)
        sums = cuda.shared.array(threads, float32)
        # one pass over the row (online softmax): a running max m and Σ exp(x - m), rescaled when m grows;
        # LOADS_IN_FLIGHT logits a block-width apart are loaded before any is used (independent loads)
        chunk = cuda.local.array(LOADS_IN_FLIGHT, float32)  # registers: every index below is a constant
        m = float32(-math.inf)
        s = float32(0)
        for base in range(tid, classes, threads * LOADS_IN_FLIGHT):
            top = m
            for k in range(LOADS_IN_FLIGHT):
                j = base + k * threads
                x = logits[row, j] if j < classes else float32(-math.inf)
                chunk[k] = x
                top = max(top, x)  # a NaN x is skipped here and spreads through its exp below
            if top > m:  # rescale the sum to the new max (s is 0 while m is -inf)
                s = s * math.exp(m - top) if s > 0 else s
                m = top
            for k in range(LOADS_IN_FLIGHT):
                x = chunk[k]
                if m > float32(-math.inf) or x != x:  # masked (-inf) logits before any finite one add 0
                    s += math.exp(x - m)
        maxima[tid] = m
        sums[tid] = s
        cuda.syncthreads()
        step = threads // 2
        while step >= last_shared_step:  # a tree over the block, in shared memory
            if tid < step:
                maxima[tid], sums[tid] = combine(maxima[tid], sums[tid], maxima[tid + step], sums[tid + step])
            cuda.syncthreads()
            step //= 2
        m, s = maxima[tid], sums[tid]
        if shuffles and tid < WARP:  # the first warp: its 32 pairs to lane 0 through registers
            step = WARP // 2
            while step > 0:
                other_m = cuda.shfl_down_sync(uint32(ALL_LANES), m, step)
                other_s = cuda.shfl_down_sync(uint32(ALL_LANES), s, step)
                m, s = combine(m, s, other_m, other_s)
                step //= 2
        if tid == 0:  # a row of only -inf: s is 0 and the loss NaN, as torch's (lse -inf, as log(0) on a GPU)
            row_lse = m if s == float32(0) else m + math.log(s)
            lse[row] = row_lse
            target = targets[row]
            # a target outside [0, C) (unchecked on the host for CUDA tensors) makes the loss NaN
            picked = logits[row, target] if 0 <= target < classes else float32(math.nan)
            row_loss[row] = (row_lse - picked) * inv_n

    return forward


@cache
def _backward_kernel() -> Any:
    bind_cuda(globals())
    from numba import float32

    @cuda.jit
    def backward(logits, targets, lse, grad_out, inv_n, dlogits):
        rows, classes = logits.shape
        scale = grad_out[0] * inv_n
        # thread x walks a row's classes, thread y picks the row: no division to find either
        per_block = cuda.blockDim.y
        for row in range(cuda.blockIdx.x * per_block + cuda.threadIdx.y, rows, cuda.gridDim.x * per_block):
            target = targets[row]
            row_lse = lse[row]
            for col in range(cuda.threadIdx.x, classes, cuda.blockDim.x):
                p = math.exp(logits[row, col] - row_lse)
                if col == target:
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
