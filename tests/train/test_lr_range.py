"""find_lr: the learning-rate range test through the Trainer (its record, the suggestion on a problem whose
stable lrs are known, the model put back, the ends it can reach, on 2 ranks) and its figure."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from workbench.parallel import DataParallel, FullyShardedDataParallel, launch
from workbench.train import LrRange, OptimizerConfig, TrainConfig, Trainer, find_lr
from workbench.widgets import lr_range_figure


def _regression(n: int = 2048, d: int = 16) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=generator)
    noise = 0.1 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, x @ torch.randn(d, 1, generator=generator) + noise)


def _sgd(**changes) -> TrainConfig:
    return TrainConfig(batch_size=64, optimizer=OptimizerConfig("sgd", lr=0.5, momentum=0.0), **changes)


def test_the_suggestion_trains_where_plain_sgd_is_stable_and_the_test_stops_once_the_loss_blows_up():
    """Least squares on unit-variance features: the MSE's curvature is about 2, so plain SGD converges for
    lr below about 1 and blows up above; the test must end soon after 1 and suggest an lr below it that
    trains well."""
    data, model = _regression(), torch.nn.Linear(16, 1)
    result = find_lr(model, F.mse_loss, data, _sgd(), start_lr=1e-5, end_lr=100.0, progress=False)
    assert result.ended == "diverged"
    assert 1.0 < result.lrs[-1] < 10.0, f"ended at lr {result.lrs[-1]:.3g}"
    assert result.suggestion is not None and 1e-2 <= result.suggestion <= 1.0, result
    trained = Trainer(model, F.mse_loss, data, _sgd(epochs=1).replace(optimizer=OptimizerConfig(
        "sgd", lr=result.suggestion, momentum=0.0)), progress=False).fit()  # fmt: skip
    assert trained.train_loss < 0.05, trained.train_loss  # from about 17: the noise floor is 0.01


def test_each_step_uses_the_next_lr_of_an_exponential_range_from_start_lr_to_end_lr():
    result = find_lr(torch.nn.Linear(16, 1), F.mse_loss, _regression(), _sgd(), start_lr=1e-6, end_lr=1e-3,
                     steps=31, progress=False)  # fmt: skip
    assert result.ended == "reached end_lr" and len(result.lrs) == 31
    assert result.lrs[0] == pytest.approx(1e-6) and result.lrs[-1] == pytest.approx(1e-3)
    ratios = [later / earlier for earlier, later in itertools.pairwise(result.lrs)]
    assert ratios == pytest.approx([10 ** (3 / 30)] * 30)
    assert len(result.losses) == len(result.smoothed) == 31 and result.smoothed[0] == result.losses[0]


def test_the_model_gets_its_weights_and_buffers_back_and_the_config_is_untouched():
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    before = {name: value.clone() for name, value in model.state_dict().items()}
    config = _sgd(epochs=3, eval_every_steps=5)
    find_lr(model, F.mse_loss, (_regression(), _regression(256)), config, steps=20, progress=False)
    after = model.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before), "weights or running stats moved"
    assert config.epochs == 3 and config.optimizer.lr == 0.5 and config.eval_every_steps == 5


def test_a_config_with_ema_decay_averages_nothing_during_the_test(monkeypatch):
    """The range test evaluates nothing and puts the weights back: keeping an average would be wasted."""
    from workbench.train.weight_average import WeightAverage

    averaged = []
    update = WeightAverage.update
    monkeypatch.setattr(WeightAverage, "update", lambda self: (averaged.append(self.active), update(self)))
    config = _sgd(ema_decay=0.99)
    result = find_lr(torch.nn.Linear(16, 1), F.mse_loss, _regression(), config, steps=10, progress=False)
    assert len(result.lrs) == 10 and averaged == [False] * 10 and config.ema_decay == 0.99


def test_a_loss_that_turns_nan_ends_the_test_with_what_it_saw_and_no_error():
    model = torch.nn.Linear(16, 1)
    before = [p.clone() for p in model.parameters()]
    result = find_lr(model, F.mse_loss, _regression(), _sgd(), start_lr=1e-3, end_lr=1e30, diverge=1e300,
                     progress=False)  # fmt: skip
    assert result.ended == "non-finite loss" and 5 < len(result.losses) < 100
    assert all(math.isfinite(loss) for loss in result.losses)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_start_lr_already_too_high_gives_no_suggestion_and_says_why():
    result = find_lr(torch.nn.Linear(16, 1), F.mse_loss, _regression(), _sgd(), start_lr=3.0, end_lr=1e4,
                     progress=False)  # fmt: skip
    assert result.suggestion is None and "start_lr may already be too high" in result.reason
    assert "no suggestion" in str(result)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"steps": 2}, "steps"),
        ({"start_lr": 1.0, "end_lr": 0.1}, "0 < start_lr < end_lr"),
        ({"start_lr": 0}, "0 < start_lr < end_lr"),
        ({"diverge": 1}, "diverge must be a number > 1"),
        ({"run": "lr-test"}, "find_lr takes no run"),
        ({"scheduler": None}, "find_lr takes no scheduler"),
    ],
)
def test_bad_arguments_are_named_with_what_is_accepted(options, says):
    with pytest.raises((ValueError, TypeError), match=says):
        find_lr(torch.nn.Linear(16, 1), F.mse_loss, _regression(64), _sgd(), progress=False, **options)


def _range_on_ranks(strategy):
    """On each rank: the range test (the same lrs and losses on both), and whether the weights are back."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Linear(8, 1))
    before = {name: value.clone() for name, value in model.state_dict().items()}
    result = find_lr(model, F.mse_loss, _regression(), _sgd(), start_lr=1e-5, end_lr=100.0, strategy=strategy,
                     progress=False)  # fmt: skip
    after = {name: value.full_tensor() if hasattr(value, "full_tensor") else value  # FSDP's DTensors
             for name, value in model.state_dict().items()}  # fmt: skip
    back = all(torch.equal(before[name], after[name]) for name in before)
    results = [None, None]
    torch.distributed.all_gather_object(results, (result, back))
    return results


@pytest.mark.parametrize("strategy", [DataParallel(), FullyShardedDataParallel()], ids=["ddp", "fsdp"])
def test_on_two_ranks_every_rank_sees_the_same_range_stops_at_the_same_step_and_gets_its_weights_back(
    strategy,
):
    (first, first_back), (second, second_back) = launch(_range_on_ranks, 2, strategy=strategy, verbose=False)
    assert first_back and second_back, "the weights were not put back"
    assert first.ended == "diverged" and first.lrs == second.lrs and first.losses == second.losses
    assert first.suggestion is not None and first.suggestion <= 1.0


def test_the_figure_draws_the_losses_on_a_log_lr_axis_with_the_suggestion():
    result = LrRange.of([1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0], [1.0, 0.99, 0.8, 0.3, 0.25, 50.0], "diverged")
    figure = lr_range_figure(result)
    assert figure.layout.xaxis.type == "log"
    names = [trace.name for trace in figure.data]
    assert names == ["loss", "smoothed", "suggested lr 0.1", "lowest loss at lr 1"]
    assert figure.layout.yaxis.range[1] == pytest.approx(1.5)  # the blown-up tail does not squash the rest
    with pytest.raises(TypeError, match="what find_lr returns"):
        lr_range_figure({"lrs": []})


def test_the_suggestion_is_capped_at_a_tenth_of_the_lowest_points_lr_and_drawn_there():
    """The smoothing lags: where the steepest fall of the smoothed curve comes late, near the lowest point,
    the suggestion is a tenth of the lowest point's lr instead."""
    lrs = [10.0 ** (e / 4) for e in range(-20, 5)]
    losses = [2.0] * 18 + [1.9, 1.5, 1.0, 0.5, 0.3, 0.2, 5.0]  # falls only in the last decade before the edge
    result = LrRange.of(lrs, losses, "diverged")
    assert result.steepest > result.lowest_lr / 10
    assert result.suggestion == pytest.approx(result.lowest_lr / 10)
    assert "(a tenth of the lowest's)" in str(result)
    suggested = next(trace for trace in lr_range_figure(result).data if trace.name.startswith("suggested"))
    assert suggested.x == (pytest.approx(result.lowest_lr / 10),)


def test_a_loss_that_goes_below_zero_is_no_divergence():
    """A negative log-likelihood can fall below 0: "4 × the lowest" would call its first step a blow-up."""
    data = _regression(512)
    result = find_lr(torch.nn.Linear(16, 1), lambda out, y: F.mse_loss(out, y) - 50.0, data, _sgd(),
                     start_lr=1e-6, end_lr=1e-2, steps=20, progress=False)  # fmt: skip
    assert result.ended == "reached end_lr" and len(result.lrs) == 20
