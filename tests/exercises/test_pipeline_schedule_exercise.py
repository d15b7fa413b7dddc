"""Notebook 04b's pipeline-schedule exercise: on the simulated clock the bubble formula holds exactly for
GPipe and 1F1B, and the usual slips are named."""

from fractions import Fraction

import pytest

from workbench.exercises.mismatch import ExerciseMismatch
from workbench.exercises.pipeline_schedule import check_schedules, simulate


def gpipe(p, m):
    return [[("F", k) for k in range(m)] + [("B", k) for k in range(m)] for _ in range(p)]


def one_f_one_b(p, m, extra_warmup=0):
    schedule = []
    for s in range(p):
        warmup = min(max(p - s - 1 + extra_warmup, 0), m)
        ops = [("F", k) for k in range(warmup)]
        for k in range(m - warmup):
            ops += [("F", warmup + k), ("B", k)]
        schedule.append(ops + [("B", k) for k in range(m - warmup, m)])
    return schedule


def test_the_formula_holds_exactly_on_the_clock_and_1f1b_holds_p_micro_batches():
    for p, m in ((2, 4), (4, 8), (3, 6)):
        assert (
            simulate(gpipe(p, m)).bubble == simulate(one_f_one_b(p, m)).bubble == Fraction(p - 1, m + p - 1)
        )
        assert simulate(gpipe(p, m)).peak_held == [m] * p
        assert simulate(one_f_one_b(p, m)).peak_held == [p - s for s in range(p)]
    assert check_schedules(gpipe, one_f_one_b).startswith("both schedules: bubble = (p−1)/(m+p−1) exactly")


@pytest.mark.parametrize(
    ("schedules", "named"),
    [
        ((gpipe, gpipe), "one_f_one_b(2, 4): stage 0 holds 4 micro-batches' activations at once"),
        ((gpipe, lambda p, m: one_f_one_b(p, m, extra_warmup=1)), "stage 0 holds 3 micro-batches"),
        ((gpipe, lambda p, m: one_f_one_b(p, m, extra_warmup=-1)), "a stage idles longer than it must"),
        ((lambda p, m: gpipe(p, m)[:-1], one_f_one_b), "gpipe(2, 1) gave 1 stages, not 2"),
        ((lambda p, m: [s[::-1] for s in gpipe(p, m)], one_f_one_b), "the schedule cannot finish: stage 0"),
        (
            (lambda p, m: [s[1:] for s in gpipe(p, m)], one_f_one_b),
            "stage 0 must run ('F', k) and ('B', k) once",
        ),
    ],
)
def test_each_slip_is_named(schedules, named):
    with pytest.raises(ExerciseMismatch, match=None) as mismatch:
        check_schedules(*schedules)
    assert named in str(mismatch.value)
