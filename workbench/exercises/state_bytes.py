"""Notebook 06's exercise: the part of a training step's memory you can count by hand, checked against the
Estimator.

Before any activation, training holds the parameters, one gradient per parameter and the optimizer's state:
none for plain SGD, a momentum buffer for SGD with momentum, two moments for Adam and AdamW, all in the
parameters' dtype. A learner's ``state_bytes(model, optimizer, momentum)`` returns their sum in bytes;
`check_state_bytes` compares it with `workbench.estimate.estimate_memory`'s params + grads + optimizer_state
for an MLP, a CNN and a small transformer under each optimizer, and names the part that is off.

Example:
    >>> def state_bytes(model, optimizer, momentum):
    ...     weights = sum(p.numel() * p.element_size() for p in model.parameters())
    ...     moments = {"sgd": 1 if momentum else 0, "adam": 2, "adamw": 2}[optimizer]
    ...     return weights * (2 + moments)
    >>> check_state_bytes(state_bytes)
    'state_bytes matches the Estimator for 3 models × 4 optimizer settings'
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from workbench import models
from workbench.estimate import estimate_memory
from workbench.exercises.mismatch import ExerciseMismatch
from workbench.exercises.waiting import waits_for_learner

_SETTINGS = (("sgd", 0.0), ("sgd", 0.9), ("adam", 0.0), ("adamw", 0.0))


def _models() -> list[tuple[str, torch.nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    return [
        ("mlp(64, 10, hidden=(128, 128))", models.mlp(64, 10, hidden=(128, 128)), torch.zeros(1, 64)),
        ("small_cnn(1, 10)", models.small_cnn(1, 10), torch.zeros(1, 1, 8, 8)),
        (
            "transformer_lm(40, 16)",
            models.transformer_lm(40, 16, d_model=32, n_layers=2),
            torch.zeros(1, 16).long(),
        ),
    ]


@waits_for_learner
def check_state_bytes(state_bytes: Callable[[torch.nn.Module, str, float], float]) -> str:
    """The learner's count against the Estimator's params + grads + optimizer_state, model by model."""
    name = getattr(state_bytes, "__name__", "state_bytes")
    cases = _models()
    for label, model, sample in cases:
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        for optimizer, momentum in _SETTINGS:
            estimate = estimate_memory(
                model, method="analytic", sample=sample, batch_size=1, optimizer=optimizer, momentum=momentum
            )
            want = estimate.params + estimate.grads + estimate.optimizer_state
            got = state_bytes(model, optimizer, momentum)
            if got != want:
                setting = f"{optimizer}" + (f", momentum {momentum}" if optimizer == "sgd" else "")
                raise ExerciseMismatch(
                    f"{name}({label}, {setting}) = {got!r} bytes; the Estimator counts {want:,}: parameters "
                    f"{estimate.params:,} + gradients {estimate.grads:,} + optimizer state "
                    f"{estimate.optimizer_state:,} ({estimate.optimizer_state / weights:g}× the parameters)"
                )
    return f"{name} matches the Estimator for {len(cases)} models × {len(_SETTINGS)} optimizer settings"
