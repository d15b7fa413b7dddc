"""A model or loss whose tensors sit on two devices, the commonest failure when a CPU script first runs on a
GPU: the Trainer moves the model, and now also a loss module's tensors (``nn.CrossEntropyLoss(weight=w)``:
class weights for imbalanced data), where the outputs are; what it cannot move (a plain tensor attribute, a
tensor the forward makes without ``device=``, a functional loss's weight) is one sentence naming it and the
fix, instead of torch's "Expected all tensors to be on the same device". Here on the CPU the second device is
``meta``, whose errors are torch's own for the same mix; tests/gpu runs the same cases on CUDA."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from workbench.train.diagnose import explain_loss_error, explain_model_error
from workbench.train.objective import Objective


class WithMask(nn.Module):
    """A causal mask kept as a plain attribute, as many attention snippets keep it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.mask = torch.tril(torch.ones(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.mask[-1]


class MakesATensor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + torch.arange(4)


def _on_meta(model: nn.Module) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    return model.to("meta"), torch.randn(8, 4, device="meta"), torch.zeros(8, dtype=torch.long, device="meta")


def test_a_loss_modules_class_weights_go_where_the_outputs_are():
    model, x, y = _on_meta(nn.Linear(4, 2))
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 5.0]))
    loss, _ = Objective(loss_fn)(model, (x, y))
    assert loss.device.type == "meta" and loss_fn.weight.device.type == "meta"  # torch refused on cpu


@pytest.mark.parametrize(
    ("model", "said"),
    [
        (
            WithMask(),
            "the model's forward mixes devices: the Trainer moved its parameters and buffers to meta, but "
            "mask ((4, 4) on cpu) is a plain tensor attribute, which .to(device) leaves where it is: "
            "register it as a buffer in __init__ (self.register_buffer('name', tensor)) and it moves with "
            "the model",
        ),
        (
            MakesATensor(),
            "the model's forward mixes devices: its parameters are on meta, and a tensor it makes without "
            "device= (torch.zeros(n), torch.arange(T), torch.tensor(...)) stays on the CPU: make it where "
            "the inputs are (torch.arange(T, device=x.device)), or keep it as a buffer",
        ),
    ],
    ids=["a plain tensor attribute", "a tensor made in forward"],
)
def test_a_forward_that_mixes_devices_is_one_sentence_naming_what_stayed_behind(model, said):
    model, x, y = _on_meta(model)
    with pytest.raises(ValueError) as refused:
        Objective(F.cross_entropy)(model, (x, y))
    assert str(refused.value).startswith(said)
    assert isinstance(refused.value.__cause__, RuntimeError)  # torch's own error, kept as the cause


def test_a_functional_losss_weight_on_another_device_says_to_move_it_or_give_the_module():
    model, x, y = _on_meta(nn.Linear(4, 2))
    loss_fn = functools.partial(F.cross_entropy, weight=torch.tensor([1.0, 5.0]))
    with pytest.raises(
        ValueError, match=r"^the loss mixes devices: the outputs and targets are on meta, and "
    ):
        Objective(loss_fn)(model, (x, y))


def test_other_errors_are_not_taken_for_a_mix_of_devices():
    model = nn.Linear(4, 2)
    error = RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x3 and 4x2)")
    assert "devices" not in (explain_model_error(model, torch.zeros(8, 3), error) or "")
    assert explain_loss_error(torch.zeros(8, 2), torch.zeros(8, dtype=torch.long), error) is None
