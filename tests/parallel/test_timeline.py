"""Bubble fractions of pipeline steps, from hand-made spans (no pipeline needed)."""

from itertools import pairwise

import pytest

from workbench.parallel.strategies.timeline import (
    Span,
    StepTimeline,
    ideal_bubble_fraction,
    measured_bubble_fraction,
)

T0 = 1_700_000_000.0  # spans arrive in unix seconds


def _payloads(spans_per_stage, *, microbatches, schedule="GPipe", t0=T0):
    stages = len(spans_per_stage)
    return [
        {
            "stage": stage,
            "stages": stages,
            "microbatches": microbatches,
            "schedule": schedule,
            "spans": [[kind, i, t0 + start, t0 + end] for kind, i, start, end in spans],
        }
        for stage, spans in enumerate(spans_per_stage)
    ]


def _gpipe(stages, microbatches, f=1.0, b=1.0):
    """All forwards, then all backwards (last micro-batch's backward first is not needed here)."""
    spans = [[] for _ in range(stages)]
    for s in range(stages):
        for i in range(microbatches):
            spans[s].append(("F", i, (s + i) * f, (s + i + 1) * f))
    end_f = (stages + microbatches - 1) * f
    for s in reversed(range(stages)):
        for i in range(microbatches):
            start = end_f + (stages - 1 - s + i) * b
            spans[s].append(("B", i, start, start + b))
    return spans


ONE_F_ONE_B = [  # 2 stages, 4 micro-batches, unit passes: stage 0 waits for B0 and for B3
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("B", 0, 3, 4), ("F", 2, 4, 5),
     ("B", 1, 5, 6), ("F", 3, 6, 7), ("B", 2, 7, 8), ("B", 3, 9, 10)],
    [("F", 0, 1, 2), ("B", 0, 2, 3), ("F", 1, 3, 4), ("B", 1, 4, 5),
     ("F", 2, 5, 6), ("B", 2, 6, 7), ("F", 3, 7, 8), ("B", 3, 8, 9)],
]  # fmt: skip


def test_ideal_bubble_is_p_minus_1_over_m_plus_p_minus_1():
    assert ideal_bubble_fraction(2, 2) == pytest.approx(1 / 3)
    assert ideal_bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert ideal_bubble_fraction(1, 5) == 0.0


def test_gpipe_2_by_2_with_unit_spans_measures_the_ideal_third():
    payloads = _payloads(_gpipe(2, 2), microbatches=2)
    assert measured_bubble_fraction(payloads) == pytest.approx(1 / 3)
    step = StepTimeline.from_payloads(payloads)
    assert step.makespan == pytest.approx(6.0)
    assert step.bubble == pytest.approx(step.ideal_bubble) == pytest.approx(1 / 3)


@pytest.mark.parametrize(("stages", "microbatches"), [(2, 4), (3, 2), (4, 8)])
def test_gpipe_with_equal_spans_measures_the_ideal(stages, microbatches):
    payloads = _payloads(_gpipe(stages, microbatches, f=0.5, b=1.0), microbatches=microbatches)
    assert measured_bubble_fraction(payloads) == pytest.approx(ideal_bubble_fraction(stages, microbatches))


def test_one_f_one_b_shaped_step_measures_its_ideal_fifth():
    step = StepTimeline.from_payloads(_payloads(ONE_F_ONE_B, microbatches=4, schedule="1F1B"))
    assert step.schedule == "1F1B" and (step.stages, step.microbatches) == (2, 4)
    assert step.makespan == pytest.approx(10.0)
    assert step.bubble == pytest.approx(0.2) and step.ideal_bubble == pytest.approx(0.2)


def test_idle_gaps_raise_the_measured_fraction():
    gapped = [
        [(k, i, start + (start >= 3), end + (start >= 3)) for k, i, start, end in stage]
        for stage in _gpipe(2, 2)
    ]
    payloads = _payloads(gapped, microbatches=2)  # every pass from t=3 on starts 1 s later: makespan 7
    assert measured_bubble_fraction(payloads) == pytest.approx(1 - 8 / 14)
    assert measured_bubble_fraction(payloads) > ideal_bubble_fraction(2, 2)


def test_times_start_at_zero_sorted_by_stage_then_start_and_payload_order_does_not_matter():
    payloads = _payloads(ONE_F_ONE_B, microbatches=4)
    step = StepTimeline.from_payloads(reversed(payloads))
    assert step.spans[0] == Span(0, "F", 0, 0.0, 1.0)
    assert [span.stage for span in step.spans] == [0] * 8 + [1] * 8
    assert all(a.start <= b.start for a, b in pairwise(step.spans) if a.stage == b.stage)
    assert step == StepTimeline.from_payloads(payloads)


def test_a_stage_without_spans_is_all_bubble():
    payloads = _payloads([[("F", 0, 0, 1)], []], microbatches=1)
    assert measured_bubble_fraction(payloads) == pytest.approx(0.5)


def test_accumulated_steps_number_micro_batches_across_their_schedule_runs():
    first, second = _gpipe(2, 2), _gpipe(2, 2)
    spans = [
        a + [(k, i + 2, start + 6, end + 6) for k, i, start, end in b]
        for a, b in zip(first, second, strict=True)
    ]
    step = StepTimeline.from_payloads(_payloads(spans, microbatches=2))  # two GPipe runs back to back
    assert step.makespan == pytest.approx(12.0) and step.bubble == pytest.approx(1 / 3)
    assert {span.microbatch for span in step.spans} == {0, 1, 2, 3}


def test_spans_that_take_no_time_have_no_bubble():
    assert measured_bubble_fraction(_payloads([[("F", 0, 1, 1)]], microbatches=1)) == 0.0


@pytest.mark.parametrize(
    ("stages", "microbatches", "field"),
    [
        (0, 4, "stages"),
        (2, 0, "microbatches"),
        (2.0, 4, "stages"),
        (True, 4, "stages"),
        (2, "4", "microbatches"),
    ],
)
def test_ideal_bubble_arguments_are_checked(stages, microbatches, field):
    with pytest.raises(ValueError, match=field):
        ideal_bubble_fraction(stages, microbatches)


def _edit(payloads, index, /, **changes):
    payloads[index] = {**payloads[index], **changes}
    return payloads


def _bad_span(span):
    payloads = _payloads(_gpipe(2, 2), microbatches=2)
    payloads[1]["spans"][2] = span
    return payloads


@pytest.mark.parametrize(
    ("payloads", "message"),
    [
        ([], "no timeline payloads"),
        ([{"stage": 0, "stages": 1, "spans": []}], "lacks microbatches, schedule"),
        (_payloads(_gpipe(2, 2), microbatches=2)[:1], r"stages \[1\] of 2 have no timeline payload"),
        (_edit(_payloads(_gpipe(2, 2), microbatches=2), 1, stage=0), "stage 0 appears twice"),
        (_edit(_payloads(_gpipe(2, 2), microbatches=2), 1, stage=2), r"stage must be an integer in \[0, 2\)"),
        (_edit(_payloads(_gpipe(2, 2), microbatches=2), 1, stage="1"), "stage must be an integer"),
        (_edit(_payloads(_gpipe(2, 2), microbatches=2), 1, stages=3), "disagree on stages: 2, 3"),
        (_edit(_payloads(_gpipe(2, 2), microbatches=2), 1, microbatches=4), "disagree on microbatches"),
        (_edit(_payloads(_gpipe(2, 2), microbatches=2), 1, schedule="1F1B"), "disagree on schedule"),
        (_edit(_payloads(_gpipe(2, 2), microbatches=2), 0, stages=0), "timeline stages must be"),
        (_edit(_payloads(_gpipe(2, 2), microbatches=2), 0, microbatches=-1), "timeline microbatches must be"),
        (_payloads([[], []], microbatches=1), "hold no spans"),
        (_bad_span(["F", 0, 1.0]), r"stage 1 span 2 must be \[kind, microbatch, start, end\]"),
        (_bad_span("F0"), "must be"),
        (_bad_span(["X", 0, 1.0, 2.0]), "kind 'X'; expected 'F'"),
        (_bad_span(["B", -1, 1.0, 2.0]), "micro-batch -1; expected an integer ≥ 0"),
        (_bad_span(["B", None, 1.0, 2.0]), "micro-batch None"),
        (_bad_span(["B", 0, float("nan"), 2.0]), "start nan; expected a finite time"),
        (_bad_span(["B", 0, 1.0, "2"]), "end '2'"),
        (_bad_span(["B", 0, 2.0, 1.0]), r"ends before it starts \(2.0 > 1.0\)"),
    ],
)
def test_malformed_steps_raise_saying_what_is_wrong(payloads, message):
    with pytest.raises(ValueError, match=message):
        measured_bubble_fraction(payloads)
