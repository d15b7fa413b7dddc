import itertools
import math

import pytest
import torch

from workbench.train import OptimizerConfig, build_optimizer, lr_factor


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (OptimizerConfig("sgd", lr=0.1, momentum=0.9, nesterov=True), torch.optim.SGD),
        (OptimizerConfig("adam", lr=1e-3), torch.optim.Adam),
        (OptimizerConfig("adamw", lr=1e-3, weight_decay=0.01), torch.optim.AdamW),
    ],
)
def test_build_optimizer_gives_the_named_torch_optimizer(config, expected):
    optimizer = build_optimizer(torch.nn.Linear(2, 1).parameters(), config)
    assert type(optimizer) is expected
    assert optimizer.defaults["lr"] == config.lr
    assert optimizer.defaults["weight_decay"] == config.weight_decay


def test_schedules_start_at_peak_and_end_at_zero():
    for schedule in ("linear", "cosine"):
        factors = [lr_factor(schedule, s, 10) for s in range(10)]
        assert factors[0] == 1.0 and factors[-1] == pytest.approx(0.0, abs=1e-12)
        assert all(a >= b for a, b in itertools.pairwise(factors))
    assert [lr_factor("constant", s, 10) for s in range(10)] == [1.0] * 10


def test_warmup_rises_linearly_then_hands_over():
    factors = [lr_factor("cosine", s, 20, warmup_steps=4) for s in range(20)]
    assert factors[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert factors[-1] == pytest.approx(0.0, abs=1e-12)
    assert factors[12] == pytest.approx(0.5 * (1 + math.cos(math.pi * 8 / 15)))


def test_unknown_schedule_raises():
    with pytest.raises(ValueError, match="schedule='step'"):
        lr_factor("step", 3, 10)
