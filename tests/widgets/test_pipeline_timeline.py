import threading

import pytest

from workbench.train.events import Callback
from workbench.widgets.pipeline_timeline import PipelineTimeline

T0 = 1_700_000_000.0

GPIPE_2X2 = [  # unit passes: 8 s busy of 2 stages × 6 s, bubble 1/3
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("B", 0, 4, 5), ("B", 1, 5, 6)],
    [("F", 0, 1, 2), ("F", 1, 2, 3), ("B", 0, 3, 4), ("B", 1, 4, 5)],
]
ONE_F_ONE_B = [  # 2 stages, 4 micro-batches, unit passes: bubble 0.2; stretched ×1.5 on stage 1 below
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("B", 0, 3, 4), ("F", 2, 4, 5),
     ("B", 1, 5, 6), ("F", 3, 6, 7), ("B", 2, 7, 8), ("B", 3, 9, 10)],
    [("F", 0, 1, 2), ("B", 0, 2, 3), ("F", 1, 3, 4), ("B", 1, 4, 5),
     ("F", 2, 5, 6), ("B", 2, 6, 7), ("F", 3, 7, 8), ("B", 3, 8, 9)],
]  # fmt: skip


def _payload(stage, spans, *, stages, microbatches, schedule="GPipe", t0=T0):
    return {
        "stage": stage,
        "stages": stages,
        "microbatches": microbatches,
        "schedule": schedule,
        "spans": [[kind, i, t0 + start, t0 + end] for kind, i, start, end in spans],
    }


def _payloads(spans_per_stage, microbatches, schedule="GPipe", t0=T0):
    n = len(spans_per_stage)
    return [
        _payload(s, spans, stages=n, microbatches=microbatches, schedule=schedule, t0=t0)
        for s, spans in enumerate(spans_per_stage)
    ]


def _event(step, payload):
    return {"step": step, "epoch": 0, "loss": 1.0, "lr": 0.1, "rank": payload["stage"], "timeline": payload}


def _bars(view):
    return sum(0 if trace.x is None else len(trace.x) for trace in view.figure.data)


def _trace(view, name):
    return next(trace for trace in view.figure.data if trace.name == name)


def test_is_a_callback_and_displays_as_its_vbox():
    view = PipelineTimeline()
    assert isinstance(view, Callback)
    bundle = view._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == view.widget.model_id
    assert bundle["text/plain"] == repr(view) == "PipelineTimeline(no complete step yet)"
    assert view.bubble() is None and view.latest() is None


def test_a_step_is_drawn_only_once_every_stage_has_reported():
    threads_before = set(threading.enumerate())
    view = PipelineTimeline()
    view.on_fit_start({"start_step": 0})
    stage_0, stage_1 = _payloads(GPIPE_2X2, 2)
    view.on_step(_event(1, stage_0))
    view.on_step({"step": 1, "loss": 1.0, "rank": 0})  # steps without a timeline are ignored
    view.flush()
    assert _bars(view) == 0 and view.latest() is None
    view.on_step(_event(1, stage_1))
    view.on_fit_end({"status": "finished"})
    assert _bars(view) == 8  # one bar per span
    step, timeline = view.latest()
    assert step == 1 and timeline.stages == 2
    assert view.bubble() == pytest.approx((1 / 3, 1 / 3))
    assert [t for t in threading.enumerate() if t not in threads_before and t.is_alive()] == []


def test_bars_are_spans_forward_solid_backward_hatched_labelled_and_coloured_by_micro_batch():
    view = PipelineTimeline()
    view.show_step(_payloads(GPIPE_2X2, 2))
    forward, backward = _trace(view, "forward"), _trace(view, "backward")
    assert forward.orientation == backward.orientation == "h"
    assert list(forward.y) == ["stage 0", "stage 0", "stage 1", "stage 1"]
    assert list(forward.base) == [0.0, 1.0, 1.0, 2.0] and list(forward.x) == [1.0] * 4
    assert list(forward.text) == ["F0", "F1", "F0", "F1"] and list(backward.text) == ["B0", "B1", "B0", "B1"]
    assert list(backward.base) == [4.0, 5.0, 3.0, 4.0]
    assert forward.marker.pattern.shape == "" and backward.marker.pattern.shape == "/"
    colors = list(forward.marker.color)
    assert colors[0] == colors[2] != colors[1] == colors[3]  # F0 on both stages share a colour
    assert list(backward.marker.color) == colors
    assert list(view.figure.layout.yaxis.categoryarray) == ["stage 0", "stage 1"]
    assert view.figure.layout.yaxis.autorange == "reversed"  # stage 0 on top


def test_the_title_states_schedule_shape_and_both_bubbles():
    view = PipelineTimeline()
    stretched = [
        ONE_F_ONE_B[0],
        [(k, i, 1 + (s - 1) * 1.5, 1 + (e - 1) * 1.5) for k, i, s, e in ONE_F_ONE_B[1]],
    ]
    timeline = view.show_step(_payloads(ONE_F_ONE_B, 4, schedule="1F1B"), step=7)
    assert timeline.bubble == pytest.approx(0.2)
    assert view.figure.layout.title.text == (
        "1F1B · 2 stages × 4 micro-batches · bubble 20% measured, 20% = (p−1)/(m+p−1)"
    )
    assert repr(view) == (
        "PipelineTimeline(step 7, 1F1B, 2 stages × 4 micro-batches, bubble 20% measured, 20% ideal)"
    )
    view.show_step(_payloads(stretched, 4, schedule="1F1B"))  # slow stage 1: stage 0 waits longer
    measured, ideal = view.bubble()
    assert measured > ideal == pytest.approx(0.2)
    assert f"bubble {measured:.0%} measured, 20% = (p−1)/(m+p−1)" in view.figure.layout.title.text
    assert repr(view).startswith("PipelineTimeline(stored step, 1F1B,")
    assert _bars(view) == 16


def test_one_stage_and_one_micro_batch_read_in_the_singular():
    view = PipelineTimeline()
    view.show_step(_payloads([[("F", 0, 0, 1), ("B", 0, 1, 3)]], 1, schedule="GPipe"))
    assert view.figure.layout.title.text.startswith("GPipe · 1 stage × 1 micro-batch · bubble 0% measured")


def test_the_newest_complete_step_wins_and_stragglers_are_ignored():
    view = PipelineTimeline()
    view.on_fit_start({"start_step": 0})
    gpipe = _payloads(GPIPE_2X2, 2)
    one_f_one_b = _payloads(ONE_F_ONE_B, 4, schedule="1F1B", t0=T0 + 100)
    view.on_step(_event(1, gpipe[0]))
    view.on_step(_event(2, one_f_one_b[1]))
    view.on_step(_event(2, one_f_one_b[0]))  # step 2 completes first
    view.on_step(_event(1, gpipe[1]))  # step 1's last stage arrives late: too old to draw
    view.flush()
    assert view.latest()[0] == 2 and _bars(view) == 16
    assert view.figure.layout.title.text.startswith("1F1B")
    view.on_fit_start({"start_step": 0})  # a fresh fit numbers its steps from 1 again
    for payload in gpipe:
        view.on_step(_event(1, payload))
    view.on_fit_end({"status": "finished"})
    assert view.latest()[0] == 1 and _bars(view) == 8


def test_at_most_max_pending_incomplete_steps_are_kept():
    view = PipelineTimeline(max_pending=2)
    stage_0, stage_1 = _payloads(GPIPE_2X2, 2)
    for step in (1, 2, 3):
        view.on_step(_event(step, stage_0))
    view.on_step(_event(1, stage_1))  # step 1 was dropped to keep 2 pending
    assert view.latest() is None
    view.on_step(_event(3, stage_1))
    assert view.latest()[0] == 3


def test_timeline_events_are_buffered_and_drawn_by_the_timer_thread():
    view = PipelineTimeline(max_updates_per_s=20)
    for payload in _payloads(GPIPE_2X2, 2):
        view.on_step(_event(1, payload))
    assert _bars(view) == 0  # nothing drawn on the training thread
    for _ in range(100):
        if _bars(view):
            break
        threading.Event().wait(0.01)
    assert _bars(view) == 8
    view.on_fit_end({"status": "finished"})


def test_bad_payloads_raise():
    view = PipelineTimeline()
    with pytest.raises(ValueError, match="a timeline must be a dict with a 'stage' key"):
        view.on_step({"step": 1, "timeline": [0, 2]})
    with pytest.raises(ValueError, match="timeline stages must be an integer"):
        view.on_step({"step": 1, "timeline": {"stage": 0}})
    stage_0, stage_1 = _payloads(GPIPE_2X2, 2)
    view.on_step(_event(1, stage_0))
    with pytest.raises(ValueError, match="disagree on microbatches"):
        view.on_step(_event(1, {**stage_1, "microbatches": 3}))
    with pytest.raises(ValueError, match=r"stages \[1\] of 2 have no timeline payload"):
        view.show_step([stage_0])
    assert view.latest() is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"max_pending": 0}, "max_pending"), ({"max_updates_per_s": 0}, "max_updates_per_s")],
)
def test_constructor_arguments_are_checked(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PipelineTimeline(**kwargs)
