"""Gradient clipping in place: by the global L2 norm over many buffers, or element by element.

    norm = clip_grad_norm(grads, max_norm=1.0)   # the norm before clipping, as torch returns it
    clip_grad_value(grads, clip_value=0.5)

`clip_grad_norm` is torch.nn.utils.clip_grad_norm_: ``coef = max_norm / (norm + 1e-6)``, and when
``coef < 1`` every gradient is multiplied by it. The squares of all buffers are summed into one float32 on
the device (the reduction kernel of :mod:`workbench.kernels.reduce`); the scaling kernels read that sum
there, so nothing waits for the host until the norm is returned.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cache
from typing import Any

import numpy as np

from workbench._validate import check_nonnegative
from workbench.kernels._numba import (
    GPU_THREADS,
    Buffer,
    as_buffer,
    bind_cuda,
    is_array,
    launch,
    launch_1d,
    read_scalar,
    zeros,
)
from workbench.kernels.reduce import accumulate_into
from workbench.kernels.targets import F32_1D, KernelTarget

cuda: Any = None  # numba.cuda, bound on the first launch (importing this module imports no numba)

EPSILON = 1e-6  # torch's: coef = max_norm / (total_norm + 1e-6)


def clip_grad_norm_spec(grads: Iterable[Any], max_norm: float) -> tuple[list[np.ndarray], float]:
    """The reference in float64: (clipped copies of `grads`, the total norm before clipping).

    Example:
        >>> clipped, norm = clip_grad_norm_spec([[3.0], [4.0]], max_norm=1.0)
        >>> norm, [round(float(g[0]), 4) for g in clipped]
        (5.0, [0.6, 0.8])
    """
    grads = [np.asarray(g, np.float64) for g in grads]
    norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads))
    coef = min(1.0, max_norm / (norm + EPSILON))
    return [g * coef for g in grads], norm


def clip_grad_value_spec(grads: Iterable[Any], clip_value: float) -> list[np.ndarray]:
    """The reference: each element cut to [-clip_value, clip_value], in float64.

    Example:
        >>> clip_grad_value_spec([[-2.0, 0.5, 3.0]], 1.0)[0]
        array([-1. ,  0.5,  1. ])
    """
    return [np.clip(np.asarray(g, np.float64), -clip_value, clip_value) for g in grads]


def clip_grad_norm(
    grads: Any,
    max_norm: float,
    *,
    threads: int | None = None,
    blocks: int | None = None,
    return_norm: bool = True,
) -> float | None:
    """Scale `grads` in place so that their global L2 norm is at most `max_norm`; return the norm before.

    Args:
        grads: a float32 array or a sequence of them (torch tensors, NumPy arrays or device arrays), e.g.
            ``[p.grad for p in model.parameters()]``.
        max_norm: the largest norm kept, ≥ 0.
        threads, blocks: the launch of each kernel (defaults as `workbench.kernels.reduce.sum`).
        return_norm: False: return None and never wait for the GPU (the norm stays on the device; reading
            it is the one host sync here).

    Returns:
        The total norm before clipping, a Python float (float32 precision); None when not `return_norm`.

    Raises:
        ValueError: `max_norm` is negative or not a number, `grads` is empty, or a buffer is bad.

    Example:
        >>> grads = [np.array([3.0], np.float32), np.array([4.0], np.float32)]
        >>> clip_grad_norm(grads, max_norm=1.0)
        5.0
        >>> [g.round(4) for g in grads]
        [array([0.6], dtype=float32), array([0.8], dtype=float32)]
    """
    max_norm = check_nonnegative("max_norm", max_norm)
    buffers = _buffers(grads)
    total = zeros((1,), like=buffers[0])  # Σ g² over every buffer, on the device
    for buffer in buffers:
        accumulate_into(total, buffer, square=True, threads=threads, blocks=blocks)
    kernel = _scale_kernel()
    for buffer in buffers:
        launch_blocks, launch_threads = launch_1d(buffer.size, threads, blocks)
        # grid `blocks`, block `threads`, grid-stride; each thread reads the total once, then, when
        # clipping, reads and writes each of its elements once
        launch(
            kernel,
            launch_blocks,
            launch_threads,
            buffer.stream(),
            buffer,
            total,
            np.float32(max_norm),
        )
        buffer.result()
    if not return_norm:
        return None
    return float(np.sqrt(np.float32(read_scalar(total))))


def sum_of_squares(arrays: Any, *, threads: int | None = None, blocks: int | None = None) -> Any:
    """Σ x² over every element of `arrays` (one array or a sequence), summed on the device without waiting
    for it: a one-element float32 array of the first array's kind (a torch tensor for torch tensors).

    Example:
        >>> sum_of_squares([np.array([3.0], np.float32), np.array([4.0], np.float32)])
        array([25.], dtype=float32)
    """
    buffers = _buffers(arrays)
    total = zeros((1,), like=buffers[0])
    for buffer in buffers:
        accumulate_into(total, buffer, square=True, threads=threads, blocks=blocks)
    return total.result()


def clip_grad_value(
    grads: Any, clip_value: float, *, threads: int | None = None, blocks: int | None = None
) -> None:
    """Cut every element of `grads` to [-clip_value, clip_value], in place.

    Args:
        grads: a float32 array or a sequence of them.
        clip_value: the largest magnitude kept, ≥ 0.
        threads, blocks: the launch of each kernel (defaults as `workbench.kernels.reduce.sum`).

    Raises:
        ValueError: `clip_value` is negative or not a number, `grads` is empty, or a buffer is bad.

    Example:
        >>> g = np.array([-2.0, 0.5, 3.0], np.float32)
        >>> clip_grad_value(g, 1.0)
        >>> g
        array([-1. ,  0.5,  1. ], dtype=float32)
    """
    clip_value = check_nonnegative("clip_value", clip_value)
    kernel = _clamp_kernel()
    for buffer in _buffers(grads):
        launch_blocks, launch_threads = launch_1d(buffer.size, threads, blocks)
        # grid `blocks`, block `threads`, grid-stride; each element: 1 read, 1 write
        launch(kernel, launch_blocks, launch_threads, buffer.stream(), buffer, np.float32(clip_value))
        buffer.result()


def _buffers(grads: Any) -> list[Buffer]:
    grads = [grads] if is_array(grads) else list(grads)
    if not grads:
        raise ValueError("grads is empty; pass at least one gradient array")
    return [as_buffer(g, f"grads[{i}]").flat() for i, g in enumerate(grads)]


@cache
def _scale_kernel() -> Any:
    bind_cuda(globals())
    from numba import float32

    @cuda.jit
    def scale(x, total_squares, max_norm):
        coef = max_norm / (math.sqrt(total_squares[0]) + float32(EPSILON))
        if coef < float32(1):
            for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
                x[i] = x[i] * coef

    return scale


@cache
def _clamp_kernel() -> Any:
    bind_cuda(globals())

    @cuda.jit
    def clamp(x, limit):
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            x[i] = min(max(x[i], -limit), limit)

    return clamp


def gpu_targets() -> list[KernelTarget]:
    """The clipping kernels as launched on a GPU (the norm's sum of squares is `reduce`'s)."""
    return [
        KernelTarget("clip scale", _scale_kernel, f"({F32_1D}, {F32_1D}, float32)", GPU_THREADS, 4),
        KernelTarget("clip value", _clamp_kernel, f"({F32_1D}, float32)", GPU_THREADS, 4),
    ]
