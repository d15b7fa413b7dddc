"""Fused optimizer updates: one pass over flat fp32 buffers reads param, grad and state once, writes once.

    sgd_step(param, grad, buf, lr=0.1, momentum=0.9, nesterov=False, weight_decay=0.0, first_step=True)
    adam_step(param, grad, exp_avg, exp_avg_sq, step=1, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
              weight_decay=0.0, decoupled=False)

The arithmetic is torch.optim's, operation for operation, in float32 (scalars such as Adam's bias corrections
are computed on the host in double precision, as torch does, then rounded to float32):

- SGD (dampening 0): ``d = g + wd·p``; with momentum ``b = d`` on the first step, else ``b = μ·b + d``;
  ``d = d + μ·b`` (Nesterov) or ``d = b``; ``p = p - lr·d``.
- Adam: ``g = g + wd·p`` (L2, ``decoupled=False``) or ``p = p·(1 - lr·wd)`` (AdamW, ``decoupled=True``);
  ``m = lerp(m, g, 1-β1)``; ``v = β2·v + (1-β2)·g²``; ``p = p - lr/(1-β1^t) · m / (√v/√(1-β2^t) + ε)``.

A torch optimizer does each of these as several passes over memory; here each element is loaded and stored
once: SGD with momentum moves 5 floats per parameter (p, g, b in; p, b out), Adam 7. Each thread takes
`ELEMENTS_PER_THREAD` elements a block-width apart and issues all their loads before its first store, so a
warp has several independent memory requests in flight. Adam can also clip by the global gradient norm
inside the same pass: it reads Σ g² from the device (``grad_squares``, summed by
:func:`workbench.kernels.reduce.accumulate_into`) and scales g by ``min(1, max_norm / (‖g‖ + 1e-6))`` as
torch's ``clip_grad_norm_`` does, so clipping costs no pass of its own and no wait for the host.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np

from workbench._validate import check_int, check_nonnegative
from workbench.kernels._numba import GPU_THREADS, as_buffer, bind_cuda, check_same_shape, launch, launch_1d
from workbench.kernels.targets import F32_1D, KernelTarget

cuda: Any = None  # numba.cuda, bound on the first launch (importing this module imports no numba)

ELEMENTS_PER_THREAD = 4  # elements each thread loads before it stores any, per grid-stride round
CLIP_EPSILON = 1e-6  # torch's clip_grad_norm_: coef = max_norm / (total_norm + 1e-6)


def sgd_step_spec(
    param: Any,
    grad: Any,
    momentum_buf: Any,
    *,
    lr: float,
    momentum: float = 0.0,
    nesterov: bool = False,
    weight_decay: float = 0.0,
    first_step: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The reference in float64: the new (param, momentum buffer); the buffer is None without momentum.

    Example:
        >>> sgd_step_spec([1.0], [0.5], None, lr=0.1, momentum=0.9, first_step=True)
        (array([0.95]), array([0.5]))
    """
    p, g = np.asarray(param, np.float64), np.asarray(grad, np.float64)
    d = g + weight_decay * p
    buf = None
    if momentum:
        buf = d.copy() if first_step else momentum * np.asarray(momentum_buf, np.float64) + d
        d = d + momentum * buf if nesterov else buf
    return p - lr * d, buf


def sgd_step(
    param: Any,
    grad: Any,
    momentum_buf: Any = None,
    *,
    lr: float,
    momentum: float = 0.0,
    nesterov: bool = False,
    weight_decay: float = 0.0,
    first_step: bool = False,
    threads: int | None = None,
    blocks: int | None = None,
) -> None:
    """One SGD step of torch.optim.SGD (dampening 0), updating `param` and `momentum_buf` in place.

    Args:
        param, grad: float32 arrays of one shape (torch tensors, NumPy arrays or device arrays).
        momentum_buf: float32 array of that shape; needed when momentum > 0 (None otherwise). Not read on the
            first step, where it becomes the (decayed) gradient, as torch initialises it.
        lr: learning rate, ≥ 0.
        momentum: momentum factor μ, ≥ 0.
        nesterov: Nesterov momentum (needs momentum > 0).
        weight_decay: L2 penalty added to the gradient, ≥ 0.
        first_step: True on the first step with this momentum buffer.
        threads, blocks: the launch (defaults as `workbench.kernels.reduce.sum`).

    Raises:
        ValueError: a bad hyperparameter, a missing momentum buffer, or shapes that differ.

    Example:
        >>> p, g, b = (np.ones(3, np.float32) for _ in range(3))
        >>> sgd_step(p, g, b, lr=0.5, momentum=0.9, first_step=True)
        >>> p
        array([0.5, 0.5, 0.5], dtype=float32)
    """
    lr, momentum = (
        check_nonnegative("lr", lr, finite=True),
        check_nonnegative("momentum", momentum, finite=True),
    )
    weight_decay = check_nonnegative("weight_decay", weight_decay, finite=True)
    if nesterov and momentum == 0:
        raise ValueError("nesterov=True needs momentum > 0")
    p, g = as_buffer(param, "param"), as_buffer(grad, "grad")
    check_same_shape("param", p, "grad", g)
    b = g  # never read nor written when momentum is 0
    if momentum:
        if momentum_buf is None:
            raise ValueError(f"momentum={momentum} needs a momentum_buf shaped like param {p.shape}")
        b = as_buffer(momentum_buf, "momentum_buf")
        check_same_shape("param", p, "momentum_buf", b)
    p, g, b = p.flat(), g.flat(), b.flat()
    blocks, threads = launch_1d(math.ceil(p.size / ELEMENTS_PER_THREAD), threads, blocks)
    f32 = np.float32
    # grid `blocks`, block `threads`, grid-stride over tiles of ELEMENTS_PER_THREAD·threads elements; each
    # element: reads p, g (and b unless first step), writes p (and b)
    launch(
        _sgd_kernel(),
        blocks,
        threads,
        p.stream(),
        p,
        g,
        b,
        f32(lr),
        f32(momentum),
        f32(weight_decay),
        bool(nesterov),
        bool(first_step),
    )
    p.result()
    if momentum:
        b.result()


def adam_step_spec(
    param: Any,
    grad: Any,
    exp_avg: Any,
    exp_avg_sq: Any,
    *,
    step: int,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reference in float64: the new (param, exp_avg, exp_avg_sq).

    Example:
        >>> p, m, v = adam_step_spec([1.0], [0.5], [0.0], [0.0], step=1, lr=0.1)
        >>> round(float(p[0]), 6)
        0.9
    """
    p, g = np.asarray(param, np.float64), np.asarray(grad, np.float64)
    m, v = np.asarray(exp_avg, np.float64), np.asarray(exp_avg_sq, np.float64)
    if decoupled:
        p = p * (1 - lr * weight_decay)
    else:
        g = g + weight_decay * p
    m = m + (1 - beta1) * (g - m)
    v = beta2 * v + (1 - beta2) * g * g
    denom = np.sqrt(v) / math.sqrt(1 - beta2**step) + eps
    return p - lr / (1 - beta1**step) * m / denom, m, v


def adam_step(
    param: Any,
    grad: Any,
    exp_avg: Any,
    exp_avg_sq: Any,
    *,
    step: int,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled: bool = False,
    grad_squares: Any = None,
    max_norm: float = 0.0,
    threads: int | None = None,
    blocks: int | None = None,
) -> None:
    """One step of torch.optim.Adam (or AdamW with ``decoupled=True``), updating param and state in place.

    Args:
        param, grad, exp_avg, exp_avg_sq: float32 arrays of one shape; the two moments start at zero.
        step: this step's number, from 1 (bias correction uses β^step).
        lr: learning rate, ≥ 0.
        beta1, beta2: moment decay rates, in [0, 1).
        eps: added to the denominator, ≥ 0.
        weight_decay: L2 penalty added to the gradient (Adam) or decoupled decay p·(1 - lr·wd) (AdamW), ≥ 0.
        decoupled: AdamW's decoupled weight decay.
        grad_squares, max_norm: clip first, as ``clip_grad_norm_(max_norm)``: `grad_squares` is a float32
            array of one element holding Σ g² over every gradient clipped together (this one included), read
            on the device; `grad` itself is left unscaled. ``max_norm=0`` (the default) does not clip.
        threads, blocks: the launch (defaults as `workbench.kernels.reduce.sum`).

    Raises:
        ValueError: a bad hyperparameter, shapes that differ, or `max_norm` without `grad_squares`.

    Example:
        >>> p, g = np.ones(2, np.float32), np.full(2, 0.5, np.float32)
        >>> m, v = np.zeros(2, np.float32), np.zeros(2, np.float32)
        >>> adam_step(p, g, m, v, step=1, lr=0.1)
        >>> p.round(4)
        array([0.9, 0.9], dtype=float32)
    """
    check_int("step", step, minimum=1)
    lr, eps = check_nonnegative("lr", lr, finite=True), check_nonnegative("eps", eps, finite=True)
    weight_decay = check_nonnegative("weight_decay", weight_decay, finite=True)
    for name, beta in (("beta1", beta1), ("beta2", beta2)):
        if not 0 <= check_nonnegative(name, beta) < 1:
            raise ValueError(f"{name} must be in [0, 1), got {beta!r}")
    buffers = [as_buffer(x, name) for x, name in ((param, "param"), (grad, "grad"))]
    buffers += [as_buffer(exp_avg, "exp_avg"), as_buffer(exp_avg_sq, "exp_avg_sq")]
    for buffer, name in zip(buffers[1:], ("grad", "exp_avg", "exp_avg_sq"), strict=True):
        check_same_shape("param", buffers[0], name, buffer)
    p, g, m, v = (buffer.flat() for buffer in buffers)
    max_norm = check_nonnegative("max_norm", max_norm)
    if max_norm and grad_squares is None:
        raise ValueError(
            f"max_norm={max_norm} needs grad_squares, the sum of squared gradients on the device"
        )
    squares = as_buffer(grad_squares, "grad_squares") if max_norm else g  # g: a placeholder, never read
    # host scalars in double precision, as torch computes them, then float32 for the kernel
    f32 = np.float32
    step_size = lr / (1 - beta1**step)
    bias_correction2_sqrt = math.sqrt(1 - beta2**step)
    decay = 1 - lr * weight_decay if decoupled else 1.0
    l2 = 0.0 if decoupled else weight_decay
    blocks, threads = launch_1d(math.ceil(p.size / ELEMENTS_PER_THREAD), threads, blocks)
    # grid `blocks`, block `threads`, grid-stride over tiles of ELEMENTS_PER_THREAD·threads elements; each
    # element: reads p, g, m, v; writes p, m, v; each thread reads grad_squares once when clipping
    launch(
        _adam_kernel(),
        blocks,
        threads,
        p.stream(),
        p,
        g,
        m,
        v,
        squares,
        f32(max_norm),
        f32(1 - beta1),
        f32(beta2),
        f32(1 - beta2),
        f32(eps),
        f32(l2),
        f32(decay),
        f32(step_size),
        f32(bias_correction2_sqrt),
    )
    for buffer in (p, m, v):
        buffer.result()


@cache
def _sgd_kernel() -> Any:
    bind_cuda(globals())
    from numba import float32

    @cuda.jit
    def sgd(param, grad, buf, lr, momentum, weight_decay, nesterov, first_step):
        p = cuda.local.array(ELEMENTS_PER_THREAD, float32)  # registers: every index below is a constant
        d = cuda.local.array(ELEMENTS_PER_THREAD, float32)
        b = cuda.local.array(ELEMENTS_PER_THREAD, float32)
        n, width = param.size, cuda.blockDim.x
        tile = ELEMENTS_PER_THREAD * width
        for start in range(cuda.blockIdx.x * tile + cuda.threadIdx.x, n, cuda.gridDim.x * tile):
            for k in range(ELEMENTS_PER_THREAD):  # every load of the tile first
                i = start + k * width
                if i < n:
                    p[k] = param[i]
                    d[k] = grad[i]
                    if momentum != 0 and not first_step:
                        b[k] = buf[i]
            for k in range(ELEMENTS_PER_THREAD):
                i = start + k * width
                if i < n:
                    step = d[k]
                    if weight_decay != 0:
                        step = step + weight_decay * p[k]
                    if momentum != 0:
                        momentum_k = step if first_step else momentum * b[k] + step
                        buf[i] = momentum_k
                        step = step + momentum * momentum_k if nesterov else momentum_k
                    param[i] = p[k] - lr * step

    return sgd


@cache
def _adam_kernel() -> Any:
    bind_cuda(globals())
    from numba import float32

    # fastmath: the approximate division and square root (2 ulp) instead of IEEE's called slow paths, 39
    # CALLs in the sm_90 SASS before; also flushes denormals, which move no update past float32's rounding
    @cuda.jit(fastmath=True)
    def adam(
        param,
        grad,
        exp_avg,
        exp_avg_sq,
        grad_squares,
        max_norm,
        weight,
        beta2,
        one_minus_beta2,
        eps,
        l2,
        decay,
        step_size,
        bc2_sqrt,
    ):
        clip = float32(1)  # torch's clip_grad_norm_: min(1, max_norm / (‖g‖ + 1e-6)), from the device
        if max_norm > 0:
            clip = min(float32(1), max_norm / (math.sqrt(grad_squares[0]) + float32(CLIP_EPSILON)))
        p = cuda.local.array(ELEMENTS_PER_THREAD, float32)  # registers: every index below is a constant
        g = cuda.local.array(ELEMENTS_PER_THREAD, float32)
        m = cuda.local.array(ELEMENTS_PER_THREAD, float32)
        v = cuda.local.array(ELEMENTS_PER_THREAD, float32)
        n, width = param.size, cuda.blockDim.x
        tile = ELEMENTS_PER_THREAD * width
        for start in range(cuda.blockIdx.x * tile + cuda.threadIdx.x, n, cuda.gridDim.x * tile):
            for k in range(ELEMENTS_PER_THREAD):  # every load of the tile first
                i = start + k * width
                if i < n:
                    p[k] = param[i]
                    g[k] = grad[i]
                    m[k] = exp_avg[i]
                    v[k] = exp_avg_sq[i]
            for k in range(ELEMENTS_PER_THREAD):
                i = start + k * width
                if i < n:
                    p0 = p[k]
                    gk = g[k] * clip if max_norm > 0 else g[k]
                    if l2 != 0:
                        gk = gk + l2 * p0  # Adam's L2 penalty
                    mk = m[k]
                    # torch's lerp(m, g, w): m + w·(g - m) for w < 0.5, else g - (g - m)·(1 - w)
                    if weight < float32(0.5):
                        mk = mk + weight * (gk - mk)
                    else:
                        mk = gk - (gk - mk) * (float32(1) - weight)
                    vk = beta2 * v[k] + one_minus_beta2 * gk * gk
                    denom = math.sqrt(vk) / bc2_sqrt + eps
                    exp_avg[i] = mk
                    exp_avg_sq[i] = vk
                    param[i] = p0 * decay - step_size * (mk / denom)  # decay: AdamW's (1 for Adam)

    return adam


def gpu_targets() -> list[KernelTarget]:
    """The fused SGD and Adam updates as launched on a GPU."""
    sgd = f"({F32_1D}, {F32_1D}, {F32_1D}, float32, float32, float32, boolean, boolean)"
    adam = f"({F32_1D}, {F32_1D}, {F32_1D}, {F32_1D}, {F32_1D}" + ", float32" * 9 + ")"
    return [
        KernelTarget("sgd", _sgd_kernel, sgd, GPU_THREADS, 4),
        KernelTarget("adam", _adam_kernel, adam, GPU_THREADS, 4),
    ]
