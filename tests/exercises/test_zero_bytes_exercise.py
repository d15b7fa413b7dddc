"""Notebook 04a's ZeRO exercise: the count per stage, and each slip named with the stage and the formula."""

import pytest

from workbench.exercises.mismatch import ExerciseMismatch
from workbench.exercises.zero_bytes import check_zero_bytes, reference_bytes


def answer(P, N, stage):
    parameters = P / N if stage >= 2 else P
    gradients = P if stage <= 1 else 0
    moments = 2 * P / N if stage >= 1 else 2 * P
    return parameters + gradients + moments


def test_the_count_is_what_the_notebook_measures_and_an_answer_passes():
    assert [reference_bytes(1.0, 2, s) for s in range(4)] == [4.0, 3.0, 1.5, 1.5]  # 4P, 2P + 2P/N, 3P/N
    assert check_zero_bytes(answer).startswith("answer gives every stage 0-3")


@pytest.mark.parametrize(
    ("slip", "named"),
    [
        (
            lambda P, N, s: answer(P, N, s) if s != 1 else P + P / N + 2 * P / N,
            "stage=1) = 2,500,000, expected 3,000,000 (P + P + 2P/N)",
        ),
        (
            lambda P, N, s: answer(P, N, s) if s < 2 else P / N + P / N + 2 * P / N,
            "(P/N + 2P/N). Hint: FSDP keeps",
        ),
        (lambda P, N, s: 4 * P / N if s else 4 * P, "stage=1"),
        (lambda P, N, s: None, "= None, expected 4,000,000"),
    ],
)
def test_each_slip_is_named_with_its_stage_and_formula(slip, named):
    with pytest.raises(ExerciseMismatch) as mismatch:
        check_zero_bytes(slip)
    assert named in str(mismatch.value)
