"""What the GPU tests share."""

from __future__ import annotations

import copy
from typing import Any

import torch


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """‖got − want‖ / ‖want‖ in float64 on the CPU."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def estimate_and_cuda_peak(case: tuple) -> tuple[Any, Any]:
    """One case of the estimator's matrix (tests/estimate/test_peak_matrix.py's ``CASES``): its traced
    estimate, made on the CPU, and the `measure_peak` of the same step on the GPU."""
    from tests.estimate.test_peak_matrix import DTYPES, _estimates
    from workbench.estimate.measure import measure_peak
    from workbench.train import OptimizerConfig
    from workbench.train.optim import build_optimizer

    build, batch_of, loss, optimizer, momentum, batch, precision = case
    torch.manual_seed(0)
    model = build()
    x, y = batch_of(batch)
    traced, _ = _estimates(copy.deepcopy(model), (x, y), loss, optimizer, momentum, precision)
    model = model.cuda()
    optim = build_optimizer(model.parameters(), OptimizerConfig(optimizer, lr=1e-3, momentum=momentum))
    real = measure_peak(model, optim, loss, x.cuda(), y.cuda(), autocast_dtype=DTYPES[precision], proxy=False)
    return traced, real
