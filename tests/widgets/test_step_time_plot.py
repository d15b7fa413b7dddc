"""StepTimePlot: a bar per rank (the median of its last steps), the lowest rank's parts over steps, checks."""

import pytest

from workbench.train.events import Callback
from workbench.train.step_time import PHASES
from workbench.widgets.step_time_plot import StepTimePlot


def _parts(**seconds):
    return {**dict.fromkeys(PHASES, 0.0), **seconds}


def _step(rank, step, **seconds):
    return {"step": step, "rank": rank, "loss": 1.0, "step_time": _parts(**seconds)}


def _trace(plot, name, axis="x"):
    return next(t for t in plot.figure.data if t.name == name and (t.xaxis or "x") == axis)


def test_is_a_callback_and_shows_nothing_before_data():
    plot = StepTimePlot()
    assert isinstance(plot, Callback)
    assert repr(plot) == "StepTimePlot(no data yet)" and plot.bars() == []
    plot.on_step({"step": 1, "rank": 0, "loss": 1.0})  # a step without step_time is ignored
    assert plot.parts() == {}


def test_bars_are_each_ranks_median_over_its_window_and_the_lowest_rank_is_drawn_over_steps():
    plot = StepTimePlot(window=3)
    plot.on_fit_start({"world_size": 2})
    for step, forward in enumerate([0.5, 0.001, 0.002, 0.003], start=1):  # the slow first step leaves
        plot.on_step(_step(1, step, forward=forward, comm=0.004))
        plot.on_step(_step(0, step, forward=forward, comm=0.001, comm_overlapped=0.002))
    plot.on_fit_end({"status": "finished"})
    assert plot.bars() == ["rank 0", "rank 1"]
    assert list(_trace(plot, "forward").y) == pytest.approx([2.0, 2.0])  # ms, median of steps 2-4
    assert list(_trace(plot, "comm").y) == pytest.approx([1.0, 4.0])
    assert list(_trace(plot, "comm").customdata) == pytest.approx([2.0, 0.0])  # overlapped, on hover
    over_time = _trace(plot, "forward", axis="x2")
    assert list(over_time.x) == [1, 2, 3, 4] and list(over_time.y) == pytest.approx([500, 1, 2, 3])
    assert plot.figure.layout.yaxis2.title.text == "rank 0, ms"


def test_one_process_is_one_bar():
    plot = StepTimePlot()
    plot.on_fit_start({"world_size": 1})
    plot.on_step(_step(0, 1, backward=0.01))
    plot.on_fit_end({"status": "finished"})
    assert plot.bars() == ["one process"]
    assert repr(plot).startswith("StepTimePlot(1 rank; rank 0: 10.0 ms a step, backward 100%")


@pytest.mark.parametrize(
    ("step_time", "message"),
    [
        ("fast", "step_time must be a dict of seconds per phase"),
        ({"data": 0.1}, "step_time lacks copy, forward"),
        (_parts(forward=-1.0), r"step_time\['forward'\] must be a number ≥ 0, got -1.0"),
    ],
)
def test_a_malformed_step_time_is_named(step_time, message):
    with pytest.raises(ValueError, match=message):
        StepTimePlot().on_step({"step": 1, "rank": 0, "step_time": step_time})


def test_window_and_height_are_checked():
    with pytest.raises(ValueError, match="window"):
        StepTimePlot(window=0)
    with pytest.raises(ValueError, match="height"):
        StepTimePlot(height=10)
