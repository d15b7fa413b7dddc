"""A memory estimate from a sample the model cannot take, a target its loss cannot take, or a model fake
tensors cannot run: one clear line naming the argument, or (method="auto") the rules' estimate saying why,
never torch's traceback from inside the trace."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from workbench.estimate import estimate_memory, training_flops
from workbench.widgets import Estimator


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))


class _ReadsANumber(nn.Module):
    """Scales by a number read from the data: fine on real tensors, not on fake ones."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(20, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) / float(x.abs().max() + 1)


def test_a_sample_of_another_shape_names_its_shape_the_models_error_and_the_fix():
    said = r"sample= of shape \(1, 3, 32, 32\) does not go through the model \(RuntimeError: mat1 and mat2"
    with pytest.raises(ValueError, match=said) as raised:
        Estimator(_mlp(), torch.zeros(1, 3, 32, 32), samples_per_epoch=1000)
    assert "batch first: one sample is enough (x[:1] of your data)" in str(raised.value)


def test_the_flop_count_names_a_sample_of_another_shape_too():
    with pytest.raises(ValueError, match=r"sample= of shape \(1, 3, 32, 32\) does not go through the model"):
        training_flops(_mlp(), torch.zeros(1, 3, 32, 32))


def test_a_sample_without_its_batch_dimension_is_told_to_unsqueeze():
    with pytest.raises(
        ValueError, match=r"sample= of shape \(20,\) gave an output of shape \(2,\).*unsqueeze"
    ):
        estimate_memory(_mlp(), sample=torch.zeros(20), batch_size=8)


def test_a_target_the_loss_cannot_take_is_named():
    with pytest.raises(ValueError, match=r"loss_fn\(output, target\) fails .* target= of shape \(1, 5\)"):
        estimate_memory(
            _mlp(), sample=torch.zeros(1, 20), target=torch.zeros(1, 5), loss_fn=F.cross_entropy, batch_size=8
        )


def test_a_model_fake_tensors_cannot_run_is_estimated_by_the_rules_and_says_why(capfd):
    estimate = estimate_memory(_ReadsANumber(), sample=torch.zeros(1, 20), batch_size=8)
    why = "forward reads a number from a tensor: .item(), float(), branches on data"
    assert estimate.describe() == f"±85%, analytic (not traced: {why})"
    assert "fake_tensor" not in capfd.readouterr().err  # torch logs the failure's traceback at ERROR level
    with pytest.raises(
        ValueError, match=r"tracing a training step on fake tensors failed .* method='analytic'"
    ):
        estimate_memory(_ReadsANumber(), sample=torch.zeros(1, 20), batch_size=8, method="traced")
