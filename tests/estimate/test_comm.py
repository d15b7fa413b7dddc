"""Communication bytes: DDP's all-reduce payload counted with a comm hook on 2 gloo ranks; the formulas."""

from __future__ import annotations

import pytest
import torch

from tests.gloo_ranks import run_on_gloo_ranks
from workbench import models
from workbench.estimate import (
    BucketLog,
    communication_bytes,
    counting_allreduce_hook,
    measure_training_step,
    ring_allreduce_bytes,
)


def _ddp_step(rank: int, world_size: int) -> tuple[int, int, int]:
    """One DDP training step: (bytes all-reduced, gradient bytes, parameter count) on this rank."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = DistributedDataParallel(models.small_cnn(3, 10))
    log = BucketLog()
    model.register_comm_hook(log, counting_allreduce_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, targets = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    step = measure_training_step(
        model, optimizer, torch.nn.functional.cross_entropy, inputs, targets, buckets=log
    )
    return log.allreduce_bytes, step.grads, sum(p.numel() for p in model.parameters())


def test_ddp_allreduces_exactly_the_gradient_bytes(free_port):
    world_size = 2
    for allreduced, grad_bytes, param_count in run_on_gloo_ranks(_ddp_step, world_size, free_port()):
        assert allreduced == grad_bytes == param_count * 4
        estimate = communication_bytes("ddp", param_count, world_size)
        assert estimate.payload_bytes == allreduced
        assert estimate.sent_bytes == 2 * (world_size - 1) / world_size * allreduced


def test_formulas():
    assert communication_bytes("single", 1000, 1).sent_bytes == 0
    assert communication_bytes("ddp", 1000, 1).sent_bytes == 0  # one device: nothing to reduce
    assert communication_bytes("ddp", 1000, 8).sent_bytes == 2 * 7 / 8 * 4000
    fsdp = communication_bytes("fsdp", 1000, 4)
    assert (fsdp.payload_bytes, fsdp.sent_bytes) == (3 * 4000, 3 / 4 * 3 * 4000)
    assert communication_bytes("fsdp", 1000, 4, precision="bf16").payload_bytes == 2 * 2000 + 4000
    assert communication_bytes("pipeline", 1000, 4, activation_bytes=500).sent_bytes == 1000
    tensor = communication_bytes("tensor", 1000, 2, activation_bytes=500, layers=3)
    assert (tensor.payload_bytes, tensor.sent_bytes) == (3000, 3000)
    assert ring_allreduce_bytes(1000, 4) == 1500


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("ring", 10, 2), {}, "strategy='ring' is not supported; allowed values: 'single', 'ddp'"),
        (("ddp", 0, 2), {}, "param_count must be an integer ≥ 1"),
        (("ddp", 10, 0), {}, "devices must be an integer ≥ 1"),
        (("ddp", 10, 2), {"precision": "int8"}, "precision='int8' is not supported; allowed values: 'fp32'"),
        (("tensor", 10, 2), {"activation_bytes": -1}, "activation_bytes must be a number ≥ 0"),
        (("tensor", 10, 2), {"layers": 0}, "layers must be an integer ≥ 1"),
    ],
)
def test_bad_input_names_the_field(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        communication_bytes(*args, **kwargs)


def test_ring_allreduce_bad_input():
    with pytest.raises(ValueError, match="size_bytes must be a number ≥ 0"):
        ring_allreduce_bytes(-1, 2)
    with pytest.raises(ValueError, match="devices must be an integer ≥ 1"):
        ring_allreduce_bytes(10, 0)
