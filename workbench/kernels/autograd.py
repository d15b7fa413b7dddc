"""The numba kernels inside torch autograd: a Linear layer and a cross-entropy loss as torch modules.

    model = nn.Sequential(NumbaLinear(64, 32), nn.ReLU(), NumbaLinear(32, 10))
    loss = numba_cross_entropy(model(x), y)      # or NumbaCrossEntropyLoss()(model(x), y)
    loss.backward()                              # dX, dW via the transposed matmuls, dlogits via the kernel

`NumbaLinear` computes ``y = x @ Wᵀ + b`` with the numba matmul reading W transposed in place; its
backward is ``dX = dY @ W``, ``dW = dYᵀ @ X`` (again read in place) and ``db = Σ_rows dY``. The matmuls run
in numba; the bias broadcast-add and its column sum are torch ops. Everything is float32: on a GPU the
tensors must be CUDA tensors, on numba's simulator CPU tensors.

Gradients are checked in the tests against torch's ``nn.Linear`` and ``F.cross_entropy`` and by float32
central finite differences (no float64 path, so ``torch.autograd.gradcheck`` does not apply).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from workbench._validate import check_choice, check_int
from workbench.kernels import softmax_xent
from workbench.kernels.gemm import METHODS, matmul


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, method: str):
        rows = x.reshape(-1, x.shape[-1]).contiguous()  # (B, in), B = all leading dims
        ctx.save_for_backward(rows, weight)
        ctx.method, ctx.shape = method, x.shape
        out = matmul(rows, weight, transpose_b=True, method=method)  # (B, out) = X @ Wᵀ
        if bias is not None:
            out += bias
        return out.reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor):
        rows, weight = ctx.saved_tensors
        dy = grad_out.reshape(-1, weight.shape[0]).contiguous()  # (B, out); autograd may hand a view
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = matmul(dy, weight, method=ctx.method).reshape(ctx.shape)  # (B, out) @ (out, in)
        if ctx.needs_input_grad[1]:
            dw = matmul(dy, rows, transpose_a=True, method=ctx.method)  # (out, B) @ (B, in)
        if ctx.needs_input_grad[2]:
            db = dy.sum(dim=0)
        return dx, dw, db, None


class NumbaLinear(nn.Module):
    """``y = x @ Wᵀ + b`` like ``nn.Linear`` (same parameters, same initialisation), with numba matmuls.

    Args:
        in_features: size of each input's last dimension, ≥ 1.
        out_features: size of each output's last dimension, ≥ 1.
        bias: learn an additive bias.
        method: the matmul kernel: ``"register"`` (default), ``"vector"``, ``"tiled"`` or ``"naive"``.

    Example:
        >>> from workbench.kernels import torch_device
        >>> layer = NumbaLinear(3, 2).to(torch_device())  # CUDA, or CPU on numba's simulator
        >>> layer(torch.ones(4, 3, device=torch_device())).shape
        torch.Size([4, 2])
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, method: str = "register"):
        super().__init__()
        self.in_features = check_int("in_features", in_features, minimum=1)
        self.out_features = check_int("out_features", out_features, minimum=1)
        check_choice("method", method, METHODS)
        self.method = method
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Linear's initialisation: kaiming-uniform weights, uniform bias in ±1/√in."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(f"x has shape {tuple(x.shape)}; its last dimension must be {self.in_features}")
        return _LinearFunction.apply(x, self.weight, self.bias, self.method)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, method={self.method!r}"
        )


def numba_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy like ``F.cross_entropy(logits, target)``, forward and backward in numba.

    Args:
        logits: (N, C) float32.
        target: (N,) int64 or int32 class indices in [0, C) (checked; no ignore_index).

    Example:
        >>> from workbench.kernels import torch_device
        >>> logits = torch.zeros(2, 4, device=torch_device(), requires_grad=True)
        >>> loss = numba_cross_entropy(logits, torch.tensor([0, 3], device=torch_device()))
        >>> round(loss.item(), 4)
        1.3863
        >>> loss.backward(); logits.grad[0].tolist()
        [-0.375, 0.125, 0.125, 0.125]
    """
    loss, _ = softmax_xent.CrossEntropyFunction.apply(logits, target)
    return loss


class NumbaCrossEntropyLoss(nn.Module):
    """`numba_cross_entropy` as a module, like ``nn.CrossEntropyLoss()`` (mean reduction).

    Example:
        >>> from workbench.kernels import torch_device
        >>> logits, target = torch.zeros(3, 2), torch.tensor([0, 1, 1])
        >>> round(NumbaCrossEntropyLoss()(logits.to(torch_device()), target.to(torch_device())).item(), 4)
        0.6931
    """

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return numba_cross_entropy(logits, target)
