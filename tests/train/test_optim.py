import itertools
import math
import warnings

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


def test_a_trainer_whose_warmup_outlasts_the_fit_warns_once_with_the_fix():
    from torch.utils.data import TensorDataset

    from workbench.train import TrainConfig, Trainer

    data = TensorDataset(torch.randn(64, 3), torch.randn(64, 1))  # 4 steps of 16 an epoch

    def trainer(warmup_steps):
        optimizer = OptimizerConfig("sgd", lr=0.1, schedule="cosine", warmup_steps=warmup_steps)
        config = TrainConfig(epochs=2, batch_size=16, optimizer=optimizer)
        return Trainer(torch.nn.Linear(3, 1), torch.nn.functional.mse_loss, data, config, progress=False)

    optimizer = OptimizerConfig("sgd", lr=0.1, schedule="cosine", warmup_steps=8)
    config = TrainConfig(epochs=2, batch_size=16, optimizer=optimizer)
    with pytest.warns(UserWarning) as caught:  # the Trainer built here, in the test's own frame
        Trainer(torch.nn.Linear(3, 1), torch.nn.functional.mse_loss, data, config, progress=False)
    assert [str(w.message) for w in caught] == [
        "warmup_steps=8 is as long as the fit's 8 optimizer steps: the lr ends at 0.089, never lr=0.1; lower "
        "warmup_steps (1 is 10% of the steps) or train for more epochs"
    ]
    assert caught[0].filename == __file__  # pointed at the user's line, not the Trainer's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer(7).fit()
