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


class _DictModel(nn.Module):
    """Takes its batch as keywords, as the README's model computing its own loss does."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(20, 2)

    def forward(self, features: torch.Tensor, labels: torch.Tensor | None = None) -> dict:
        return {"logits": self.net(features)}


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (
            lambda: estimate_memory(_mlp(), sample=(torch.zeros(1, 20), torch.tensor([1])), batch_size=32),
            r"got a tuple of \(Tensor \(1, 20\), Tensor \(1,\)\): an \(input, target\) pair\? pass "
            r"sample=x\[:1\] \(and target=y\[:1\] with loss_fn=\)",
        ),
        (
            lambda: Estimator(_DictModel(), {"features": torch.zeros(1, 20)}, samples_per_epoch=1000),
            r"got a dict with keys \['features'\]: a model that takes a dict or several inputs is estimated "
            r"through a module whose forward takes one tensor",
        ),
        (lambda: training_flops(_mlp(), [torch.zeros(1, 20)] * 3), r"got a list of \(Tensor \(1, 20\), "),
    ],
)
def test_a_sample_that_is_not_one_tensor_says_what_it_got_and_what_to_pass(call, said):
    with pytest.raises(TypeError, match=r"sample= must be one input tensor, batch first \(x\[:1\] of your "):
        call()
    with pytest.raises(TypeError, match=said):
        call()


def test_the_wrapper_the_message_suggests_is_estimated():
    model = _DictModel()

    class OneTensor(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(features=x)["logits"]

    estimate = estimate_memory(OneTensor(), sample=torch.zeros(1, 20), batch_size=32)
    assert estimate.params == 42 * 4 and estimate.basis.startswith("traced")


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda: estimate_memory(nn.Linear, sample=torch.zeros(1, 20), batch_size=32),
         r"^model is the class Linear; build the model first: Linear\(\.\.\.\)$"),
        (lambda: Estimator(nn.Linear, torch.zeros(1, 20), samples_per_epoch=1000),
         r"^model is the class Linear; build the model first"),
        (lambda: training_flops(nn.Linear, torch.zeros(1, 20)), r"^model is the class Linear"),
        (lambda: estimate_memory("gpt2", sample=torch.zeros(1, 20), batch_size=32),
         r"model must be an nn.Module, a ModelProfile or a parameter count; got the name 'gpt2'"),
    ],  # a class said "(parameter count) must be an integer" or "parameters() missing 1 required argument"
)  # fmt: skip
def test_a_class_or_a_name_where_the_model_belongs_is_said(call, said):
    with pytest.raises(TypeError, match=said):
        call()
