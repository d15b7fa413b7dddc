"""Roofline step time, epoch time and FLOP counting for Linear/Conv models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench import models
from workbench.estimate import forward_flops, predict_step_time, training_flops

RATES = {"flops_per_s": 1e12, "memory_bandwidth": 1e11, "link_bandwidth": 1e10}


def test_forward_flops_of_the_package_models():
    mlp = models.mlp(64, 10, hidden=(128, 128))
    assert forward_flops(mlp, torch.zeros(4, 1, 8, 8)) == 4 * 2 * (64 * 128 + 128 * 128 + 128 * 10)
    cnn = models.small_cnn(3, 10)
    per_sample = 2 * (3 * 9 * 16 * 32 * 32 + 16 * 9 * 32 * 16 * 16 + 32 * 10)
    assert forward_flops(cnn, torch.zeros(2, 3, 32, 32)) == 2 * per_sample
    grouped = nn.Conv2d(4, 4, 3, groups=2)
    assert forward_flops(grouped, torch.zeros(1, 4, 5, 5)) == 2 * (2 * 9) * (4 * 3 * 3)
    assert training_flops(mlp, torch.zeros(4, 64)) == 3 * forward_flops(mlp, torch.zeros(4, 64))


def test_roofline_picks_the_slower_bound_and_adds_communication():
    compute = predict_step_time(1e12, 1e9, 0, **RATES)
    assert (compute.compute_s, compute.memory_s, compute.step_s, compute.bound) == (1.0, 0.01, 1.0, "compute")
    memory = predict_step_time(1e9, 1e11, 1e9, **RATES)
    assert (memory.step_s, memory.bound) == (1.1, "memory")
    comm = predict_step_time(1e9, 1e9, 1e11, **RATES)
    assert comm.bound == "communication" and comm.step_s == pytest.approx(10.01)
    assert memory.epoch_s(100) == pytest.approx(110.0)
    assert memory.epoch_s(0) == 0


@pytest.mark.parametrize(
    ("args", "changes", "message"),
    [
        ((-1, 0, 0), {}, "flops_per_step must be a number ≥ 0"),
        ((0, -1, 0), {}, "bytes_moved must be a number ≥ 0"),
        ((0, 0, -1), {}, "comm_bytes must be a number ≥ 0"),
        ((0, 0, 0), {"flops_per_s": 0}, "flops_per_s must be > 0"),
        ((0, 0, 0), {"memory_bandwidth": -1}, "memory_bandwidth must be a number ≥ 0"),
        ((0, 0, 0), {"link_bandwidth": 0}, "link_bandwidth must be > 0"),
    ],
)
def test_bad_input_names_the_field(args, changes, message):
    with pytest.raises(ValueError, match=message):
        predict_step_time(*args, **{**RATES, **changes})


def test_bad_steps():
    with pytest.raises(ValueError, match="steps must be an integer ≥ 0"):
        predict_step_time(1, 1, 1, **RATES).epoch_s(-1)
