"""GPU kernels written with numba.cuda: matmul, reductions, fused optimizers, clipping, softmax cross-entropy.

Each kernel has a NumPy spec beside it (``matmul_spec``, ``sum_spec``, ...) that the tests compare against,
and takes torch tensors (CUDA on a GPU, CPU on numba's simulator), NumPy arrays or numba device arrays.
`matmul` and `softmax_cross_entropy` on torch tensors that require grad join autograd (their backward runs
in numba too); `NumbaLinear`, `numba_cross_entropy` and `FusedAdam`/`FusedSGD` put them inside torch
modules and torch.optim, so a model trains on them through the `workbench.train.Trainer`.

Importing this package imports no numba: names are loaded on first use, and the first kernel call applies
:func:`workbench.devices.configure_numba` (GPU, or the CPU simulator without a CUDA driver) before importing
``numba.cuda``.

>>> import numpy as np
>>> from workbench.kernels import matmul, matmul_spec
>>> a = np.ones((3, 2), np.float32)
>>> bool(np.allclose(matmul(a, a, transpose_b=True), matmul_spec(a, a, transpose_b=True)))
True
"""

from __future__ import annotations

from workbench._lazy import lazy_attributes

_HOMES = {
    "FusedAdam": "workbench.kernels.optimizers",
    "FusedSGD": "workbench.kernels.optimizers",
    "NumbaCrossEntropyLoss": "workbench.kernels.autograd",
    "NumbaLinear": "workbench.kernels.autograd",
    "adam_step": "workbench.kernels.optim_kernels",
    "adam_step_spec": "workbench.kernels.optim_kernels",
    "as_device_array": "workbench.kernels._numba",
    "clip_grad_norm": "workbench.kernels.clip",
    "clip_grad_norm_spec": "workbench.kernels.clip",
    "clip_grad_value": "workbench.kernels.clip",
    "clip_grad_value_spec": "workbench.kernels.clip",
    "fused_optimizer_factory": "workbench.kernels.optimizers",
    "matmul": "workbench.kernels.gemm",
    "matmul_spec": "workbench.kernels.gemm",
    "numba_cross_entropy": "workbench.kernels.autograd",
    "sgd_step": "workbench.kernels.optim_kernels",
    "sgd_step_spec": "workbench.kernels.optim_kernels",
    "softmax_cross_entropy": "workbench.kernels.softmax_xent",
    "softmax_cross_entropy_backward": "workbench.kernels.softmax_xent",
    "softmax_cross_entropy_backward_spec": "workbench.kernels.softmax_xent",
    "softmax_cross_entropy_spec": "workbench.kernels.softmax_xent",
    "squared_norm": "workbench.kernels.reduce",
    "squared_norm_spec": "workbench.kernels.reduce",
    "sum": "workbench.kernels.reduce",
    "sum_spec": "workbench.kernels.reduce",
    "torch_device": "workbench.kernels._numba",
}

__all__ = sorted(_HOMES)

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
