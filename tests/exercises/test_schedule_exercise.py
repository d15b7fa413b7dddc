"""Notebook 02's "warm-up + cosine yourself" check: the right answer passes, each slip is named."""

import math

import pytest

from workbench.exercises import ExerciseMismatch, check_lr_schedule


def schedule(warmup_from_zero=False, span_offset=1, cosine_from_step_0=False):
    def warmup_cosine(step, total_steps, warmup_steps):
        if step < warmup_steps:
            return step / warmup_steps if warmup_from_zero else (step + 1) / (warmup_steps + 1)
        start = 0 if cosine_from_step_0 else warmup_steps
        progress = (step - start) / max(total_steps - start - span_offset, 1)
        return 0.5 * (1 + math.cos(math.pi * progress))

    return warmup_cosine


def test_the_reference_answer_passes():
    assert check_lr_schedule(schedule()).endswith("at every step of 4 runs")


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            schedule(warmup_from_zero=True),
            r"warmup_cosine\(0, 10, 3\) returned 0.0; .* is 0.25: .*starting at 0",
        ),
        (schedule(span_offset=0), r"\(1, 10, 0\) returned .*: that is the cosine ending one step late"),
        (schedule(cosine_from_step_0=True), r"\(3, 10, 3\) returned 0.75.*counted from step 0"),
        (lambda step, total, warmup: "1.0", r"<lambda>\(0, 10, 0\) returned '1.0'.*return a number"),
        (lambda step, total, warmup: step / warmup, r"<lambda>\(0, 10, 0\) raised ZeroDivisionError"),
    ],
)
def test_each_slip_is_named(answer, message):
    with pytest.raises(ExerciseMismatch, match=message):
        check_lr_schedule(answer)
