"""What the GPU tests share."""

from __future__ import annotations

import copy
from typing import Any

import torch


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """‖got − want‖ / ‖want‖ in float64 on the CPU."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def cuda_estimates(case: tuple) -> tuple[Any, Any]:
    """One case of the estimator's matrix (tests/estimate/test_peak_matrix.py's ``CASES``): its estimate made
    as a user on a GPU machine makes it, with the model on the GPU and a sample from the CPU (the check's real
    steps run on the GPU), and the same estimate made on the CPU."""
    from tests.estimate.test_peak_matrix import _estimates

    build, batch_of, loss, optimizer, momentum, batch, precision = case
    torch.manual_seed(0)
    model = build()
    x, y = batch_of(batch)
    on_cpu, _ = _estimates(copy.deepcopy(model), (x, y), loss, optimizer, momentum, precision)
    on_gpu, _ = _estimates(model.cuda(), (x, y), loss, optimizer, momentum, precision)
    return on_gpu, on_cpu


def cuda_peak(case: tuple) -> Any:
    """The `measure_peak` of one case's training step on the GPU (the model as `cuda_estimates` builds it)."""
    from tests.estimate.test_peak_matrix import DTYPES
    from workbench.estimate.measure import measure_peak
    from workbench.train import OptimizerConfig
    from workbench.train.optim import build_optimizer

    build, batch_of, loss, optimizer, momentum, batch, precision = case
    torch.manual_seed(0)
    model = build().cuda()
    x, y = batch_of(batch)
    optim = build_optimizer(model.parameters(), OptimizerConfig(optimizer, lr=1e-3, momentum=momentum))
    return measure_peak(model, optim, loss, x.cuda(), y.cuda(), autocast_dtype=DTYPES[precision], proxy=False)
