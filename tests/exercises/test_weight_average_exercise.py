"""Notebook 02's "average the weights yourself" check: the right answer passes (it is the Trainer's average,
`TrainConfig(ema_decay=...)`), each slip is named (a stub: tests/exercises/test_waiting.py)."""

import pytest

from workbench.exercises import ExerciseMismatch, check_weight_average


def update(warmup=True, swapped=False, in_place=True):
    def ema_update(average, weights, decay, updates):
        rate = min(decay, (1 + updates) / (10 + updates)) if warmup else decay
        if swapped:
            rate = 1 - rate
        if in_place:
            average.mul_(rate).add_(weights, alpha=1 - rate)
        else:
            average = rate * average + (1 - rate) * weights  # a new tensor: the caller's is unchanged

    return ema_update


def test_the_reference_answer_passes():
    assert (
        check_weight_average(update())
        == "ema_update matches the Trainer's ema_decay average at every step of 3 runs"
    )


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (update(warmup=False), r"decay=0.99, updates=0\) .*: that is the average without its warm-up"),
        (update(swapped=True), r"updates=0\) .*: that is the shares swapped"),
        (update(in_place=False), r"updates=0\) .*: that is unchanged: update `average` in place"),
        (lambda average, weights, decay, updates: average.add_(1), r"differs from the Trainer's by up to"),
        (lambda average, weights, decay, updates: average.mul_(weights.T), r"raised RuntimeError"),
    ],
)
def test_each_slip_is_named(answer, message):
    with pytest.raises(ExerciseMismatch, match=message):
        check_weight_average(answer)
