"""Notebook 06's exercise: parameters, gradients and optimizer state counted by hand against the Estimator."""

import pytest

from workbench.exercises.mismatch import ExerciseMismatch
from workbench.exercises.state_bytes import check_state_bytes


def _weights(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def answer(model, optimizer, momentum):
    moments = {"sgd": 1 if momentum else 0, "adam": 2, "adamw": 2}[optimizer]
    return _weights(model) * (2 + moments)


def test_an_answer_matches_the_estimator():
    assert check_state_bytes(answer) == "answer matches the Estimator for 3 models × 4 optimizer settings"


@pytest.mark.parametrize(
    ("slip", "named"),
    [
        (lambda m, o, mom: answer(m, o, mom) - _weights(m), "+ gradients 104,488"),  # the gradients forgotten
        (lambda m, o, mom: _weights(m) * (2 + (o != "sgd") * 2), "sgd, momentum 0.9) = 208976 bytes"),
        (lambda m, o, mom: _weights(m) * (3 if o != "sgd" else 2 + bool(mom)), "optimizer state 208,976 (2×"),
    ],
)
def test_each_slip_names_the_part_that_is_off(slip, named):
    with pytest.raises(ExerciseMismatch) as mismatch:
        check_state_bytes(slip)
    assert named in str(mismatch.value)
