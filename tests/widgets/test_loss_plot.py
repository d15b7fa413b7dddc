import itertools
import math
import threading
import time

import pytest
import torch

from workbench import models
from workbench._smoothing import ema
from workbench.data import load_dataset, split_dataset
from workbench.train import OptimizerConfig, TrainConfig, Trainer
from workbench.train.events import Callback
from workbench.train.metrics_log import MetricsLog
from workbench.widgets.loss_plot import LossPlot


def _fit(plot, run, steps, *, start_step=0, evals=(), loss=lambda step: 1.0 / step):
    plot.on_fit_start({"run": run, "start_step": start_step, "total_steps": start_step + steps})
    for step in range(start_step + 1, start_step + steps + 1):
        plot.on_step({"step": step, "epoch": 0, "loss": loss(step), "lr": 0.1, "rank": 0})
    for split in evals:
        plot.on_eval({"step": start_step + steps, "epoch": 0, "split": split, "loss": 0.5, "rank": 0})
    plot.on_fit_end({"status": "finished", "step": start_step + steps, "error": None})


def _trace(plot, name):
    """A curve by its "run curve" name (its meta; the legend may say less); "... raw": its faint raw copy."""
    if name.endswith(" raw"):
        return next(trace for trace in plot.figure.data if trace.meta == "raw" and trace.name == name)
    return next(trace for trace in plot.figure.data if trace.meta == name)


def test_is_a_callback_and_displays_as_its_vbox():
    plot = LossPlot()
    assert isinstance(plot, Callback)
    bundle = plot._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == plot.widget.model_id
    assert plot.figure in plot.widget.children
    assert {plot.log_toggle, plot.smoothing_slider} <= set(plot.widget.children[0].children)


def test_after_training_the_figure_holds_every_step_and_evaluation():
    threads_before = set(threading.enumerate())
    plot = LossPlot()
    _fit(plot, "sgd", 46, evals=("val", "test"))
    assert plot.point_counts() == {"sgd train": 46, "sgd val": 1, "sgd test": 1}
    raw, train = _trace(plot, "sgd train raw"), _trace(plot, "sgd train")
    assert list(raw.x) == list(range(1, 47)) and list(raw.y) == [1.0 / s for s in range(1, 47)]
    assert list(train.x) == list(raw.x)
    assert list(train.y) == pytest.approx(list(ema(raw.y, plot.smoothing)))  # smoothed, raw faint behind
    assert [t for t in threading.enumerate() if t not in threads_before and t.is_alive()] == []


def test_long_runs_are_drawn_downsampled():
    plot = LossPlot(max_points=100)
    _fit(plot, "long", 5000)
    assert 50 <= plot.point_counts()["long train"] <= 100


def test_runs_overlay_with_a_colour_each_train_solid_val_dashed_test_markers():
    plot = LossPlot()
    _fit(plot, "a", 10, evals=("val", "test"))
    _fit(plot, "b", 10, evals=("val",))
    assert plot.runs == ["a", "b"]
    assert set(plot.point_counts()) == {"a train", "a val", "a test", "b train", "b val"}
    a, b = _trace(plot, "a train"), _trace(plot, "b train")
    assert a.line.color != b.line.color
    assert _trace(plot, "a val").line.color == a.line.color
    assert a.line.dash == "solid" and _trace(plot, "a val").line.dash == "dash"
    assert _trace(plot, "a test").mode == "markers"
    assert a.legendgroup == "a" and _trace(plot, "a val").legendgroup == "a"


def test_unnamed_runs_are_numbered():
    plot = LossPlot()
    _fit(plot, None, 3)
    _fit(plot, None, 3)
    assert plot.runs == ["run 1", "run 2"]


def test_a_resumed_fit_continues_the_curve_and_a_fresh_one_starts_over():
    plot = LossPlot()
    _fit(plot, "r", 10, evals=("val",))
    _fit(plot, "r", 5, start_step=10)
    assert plot.point_counts() == {"r train": 15, "r val": 1}
    _fit(plot, "r", 4)
    assert plot.point_counts() == {"r train": 4, "r val": 0}
    assert plot.runs == ["r"]


def test_new_run_names_the_run_for_events_without_fit_start():
    plot = LossPlot()
    assert plot.new_run("manual") == "manual"
    plot.on_step({"step": 1, "loss": 2.0})
    plot.on_eval({"step": 1, "split": "val", "loss": 3.0})
    plot.flush()
    assert plot.point_counts() == {"manual train": 1, "manual val": 1}
    assert plot.new_run() == "run 2"


def test_steps_before_any_run_start_an_unnamed_run():
    plot = LossPlot()
    plot.on_step({"step": 1, "loss": 2.0})
    plot.flush()
    assert plot.point_counts() == {"run 1 train": 1}


def test_evaluations_of_the_train_split_are_ignored_and_each_metric_gets_a_panel():
    plot = LossPlot(height=400)
    plot.new_run("x")
    plot.on_eval({"step": 1, "split": "train", "loss": 1.0})
    plot.on_eval({"step": 1, "split": "val", "accuracy": 0.9, "f1": 0.8, "rank": 0, "time": 5.0})
    plot.on_eval({"step": 1, "split": "test", "accuracy": 0.8})
    plot.flush()
    assert plot.point_counts() == {"x val accuracy": 1, "x val f1": 1, "x test accuracy": 1}
    axes = {trace.meta: (trace.xaxis, trace.yaxis) for trace in plot.figure.data}
    assert axes == {"x val accuracy": ("x2", "y2"), "x test accuracy": ("x2", "y2"), "x val f1": ("x3", "y3")}
    layout = plot.figure.layout
    assert [a.text for a in layout.annotations] == ["accuracy", "f1"]  # each panel titled with its metric
    assert layout.height == 600 and layout.xaxis3.matches == "x"  # a row of panels, zoomed with the loss
    assert layout.yaxis2.domain[1] < layout.yaxis.domain[0]  # below the loss panel


def test_metric_panels_wrap_three_to_a_row_and_log_y_changes_only_the_loss_panel():
    plot = LossPlot(height=400)
    plot.new_run("x")
    plot.on_eval({"step": 1, "split": "val", **{f"m{i}": 0.5 for i in range(7)}})
    plot.log_toggle.value = True
    plot.flush()
    layout = plot.figure.layout
    assert layout.height == 400 + 3 * 200 and len(layout.annotations) == 7
    rows = sorted({tuple(layout[f"yaxis{n}"].domain) for n in range(2, 9)}, reverse=True)
    assert len(rows) == 3 and all(upper[0] > lower[1] for upper, lower in itertools.pairwise(rows))
    assert layout.yaxis.type == "log" and {layout[f"yaxis{n}"].type for n in range(2, 9)} == {None}


def test_the_legend_names_only_what_differs_and_one_entry_stands_for_every_rank():
    plot = LossPlot()
    plot.on_fit_start({"run": "mine-ddp-1795673927", "start_step": 0})
    for step in range(1, 5):
        for rank in range(8):
            plot.on_step({"step": step, "loss": 1.0, "rank_loss": 1.0 + rank, "rank": rank})
    plot.on_eval({"step": 4, "split": "val", "loss": 0.9, "accuracy": 0.5})
    plot.on_eval({"step": 4, "split": "test", "loss": 0.9, "accuracy": 0.5})
    plot.on_fit_end({"status": "finished"})
    entries = [trace.name for trace in plot.figure.data if trace.showlegend is not False]
    assert entries == ["train", "val", "test", "each rank"]  # no run name, 8 ranks behind one entry
    ranks = [trace for trace in plot.figure.data if trace.legendgroup == "ranks"]
    assert len(ranks) == 16  # 8 curves and their raw copies: a click on "each rank" hides or shows them all
    assert {t.legendgroup for t in plot.figure.data if (t.meta or "").endswith("accuracy")} == {"val", "test"}
    assert plot.figure.layout.legend.orientation == "h"
    plot.plot_history("other", EVENTS)  # a second run: entries under each run's name, a click hides a run
    groups = {trace.legendgroup for trace in plot.figure.data}
    assert groups == {"mine-ddp-1795673927", "other"}
    titled = {t.legendgrouptitle.text for t in plot.figure.data if t.showlegend is not False}
    assert titled == groups and plot.figure.layout.legend.orientation == "v"
    assert [t.name for t in plot.figure.data if t.showlegend is not False and t.legendgroup == "other"] == [
        "train",
        "val",
        "test",
    ]


def test_log_plots_a_hand_written_loop_with_tensors_and_named_splits():
    plot = LossPlot()
    for step in range(1, 11):
        plot.log(step, loss=torch.tensor(1.0 / step))
    plot.log(10, val_loss=0.5, test_loss=0.6, test_accuracy=0.7, f1=torch.tensor(0.4))
    plot.flush()
    assert plot.point_counts() == {
        "run 1 train": 10,
        "run 1 val": 1,
        "run 1 test": 1,
        "run 1 val f1": 1,
        "run 1 test accuracy": 1,
    }
    with pytest.raises(ValueError, match="step must be"):
        plot.log(-1, loss=1.0)


def test_non_finite_losses_are_skipped_and_the_title_says_so():
    plot = LossPlot()
    _fit(plot, "nan", 6, loss=lambda step: math.nan if step == 3 else float(step))
    assert list(_trace(plot, "nan train").x) == [1, 2, 4, 5, 6]
    said = "1 value not finite (NaN or inf), not drawn: nan train from step 3"
    assert plot.figure.layout.title.text == "Loss · " + said  # not silently missing from the curve
    assert repr(plot).endswith("; " + said + ")")
    yours = LossPlot()  # in a loop of your own, the history's values too
    yours.log(1, loss=1.0)
    yours.plot_history("old", EVENTS)
    yours.log(2, loss=math.inf, val_loss=math.nan)
    yours.flush()
    assert yours.figure.layout.title.text.startswith("Loss · 3 values not finite (NaN or inf), not drawn: ")
    assert LossPlot().figure.layout.title.text == "Loss"


EVENTS = [
    {"event": "fit_start", "run": "old", "start_step": 0},
    {"event": "step", "step": 1, "loss": 2.0},
    {"event": "step", "step": 2, "loss": "nan"},  # as MetricsLog writes a NaN loss
    {"event": "step", "step": 3, "loss": 1.0},
    {"event": "eval", "step": 3, "split": "val", "loss": 1.5},
    {"event": "eval", "step": 3, "split": "test", "loss": 1.6},
    {"event": "fit_end", "status": "finished", "step": 3},
]


def test_plot_history_draws_a_logged_run_without_disturbing_the_live_one():
    plot = LossPlot()
    plot.new_run("live")
    plot.on_step({"step": 1, "loss": 5.0})
    plot.plot_history("old", EVENTS)
    plot.on_step({"step": 2, "loss": 4.0})
    plot.flush()
    assert plot.point_counts() == {"live train": 2, "old train": 2, "old val": 1, "old test": 1}
    assert list(_trace(plot, "old train raw").y) == [2.0, 1.0]


def test_plot_history_reads_events_without_an_event_key():
    plot = LossPlot()
    plot.plot_history("bare", [{"step": 1, "loss": 1.0}, {"step": 1, "split": "val", "loss": 2.0}])
    assert plot.point_counts() == {"bare train": 1, "bare val": 1}


def test_plot_history_reads_a_run_directory(tmp_path):
    log = MetricsLog(tmp_path / "logged")
    log.on_fit_start({"run": "logged", "start_step": 0})
    for step in range(1, 8):
        log.on_step({"step": step, "loss": 1.0 / step})
    log.on_eval({"step": 7, "split": "val", "loss": 0.3})
    log.on_fit_end({"status": "finished", "step": 7})
    plot = LossPlot()
    plot.plot_history("logged", tmp_path / "logged")
    assert plot.point_counts() == {"logged train": 7, "logged val": 1}


def test_plot_history_of_a_missing_directory_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        LossPlot().plot_history("gone", tmp_path / "gone")


def test_log_toggle_switches_the_y_axis():
    plot = LossPlot()
    assert plot.figure.layout.yaxis.type == "linear"
    plot.log_toggle.value = True
    assert plot.figure.layout.yaxis.type == "log"
    plot.log_toggle.value = False
    assert plot.figure.layout.yaxis.type == "linear"
    assert LossPlot(log_y=True).figure.layout.yaxis.type == "log"


class CountingPlot(LossPlot):
    def __init__(self, **kwargs):
        self.draw_threads = []
        super().__init__(**kwargs)

    def _draw(self):
        self.draw_threads.append(threading.current_thread().name)
        super()._draw()


def test_steps_only_buffer_and_the_timer_thread_draws_at_the_set_rate():
    plot = CountingPlot(max_updates_per_s=10)
    plot.on_fit_start({"run": "t", "start_step": 0})
    plot.on_step({"step": 1, "loss": 1.0})
    assert plot.point_counts() == {}  # nothing drawn on the training thread
    started, step = time.monotonic(), 1
    while time.monotonic() - started < 0.5:
        step += 1
        plot.on_step({"step": step, "loss": 1.0})
        time.sleep(0.0005)
    timer_draws = len(plot.draw_threads)
    assert 2 <= timer_draws <= 0.5 * 10 + 1
    assert set(plot.draw_threads) == {"workbench-throttle"}
    assert 0 < plot.point_counts()["t train"] <= step
    plot.on_fit_end({"status": "finished"})
    assert plot.draw_threads[-1] == threading.current_thread().name  # the final draw, on this thread
    assert plot.point_counts() == {"t train": step}


def test_on_step_is_cheap_with_a_long_history():
    plot = LossPlot()
    plot.on_fit_start({"run": "fast", "start_step": 0})
    for step in range(1, 200_001):
        plot.on_step({"step": step, "loss": 1.0})
    started = time.perf_counter()
    for step in range(200_001, 210_001):
        plot.on_step({"step": step, "loss": 1.0})
    mean_us = (time.perf_counter() - started) / 10_000 * 1e6
    plot.on_fit_end({"status": "finished"})
    assert mean_us < 50  # about 1 µs on a laptop; the bound only catches work that grows with history
    assert plot.point_counts()["fast train"] <= 1000


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_steps_from_a_training_thread_while_the_user_toggles_log_scale():
    plot = LossPlot(max_updates_per_s=50)
    errors = []

    def train():
        try:
            _fit(plot, "bg", 20_000, evals=("val",))
        except BaseException as error:  # reported below
            errors.append(error)

    thread = threading.Thread(target=train)
    thread.start()
    flips = 0
    while thread.is_alive() or flips < 10:
        plot.log_toggle.value = not plot.log_toggle.value
        flips += 1
        time.sleep(0.001)
    thread.join()
    assert errors == []
    counts = plot.point_counts()
    assert 500 <= counts["bg train"] <= 1000 and counts["bg val"] == 1
    assert plot.figure.layout.yaxis.type == ("log" if plot.log_toggle.value else "linear")


class StepCounter(Callback):
    def __init__(self):
        self.steps = 0

    def on_step(self, metrics):
        self.steps += 1


def test_a_real_trainer_feeds_the_plot():
    splits = split_dataset(load_dataset("regression", n_samples=512), (0.8, 0.1, 0.1), seed=0)
    config = TrainConfig(epochs=2, batch_size=64, optimizer=OptimizerConfig("sgd", lr=0.1))
    plot, counter = LossPlot(), StepCounter()
    Trainer(models.linear(10), torch.nn.functional.mse_loss, splits, config, callbacks=[plot, counter]).fit()
    assert plot.point_counts() == {"run 1 train": counter.steps, "run 1 val": 2, "run 1 test": 1}
    assert counter.steps > 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_points": 1}, "max_points"),
        ({"max_points": 10.5}, "max_points"),
        ({"max_updates_per_s": 0}, "max_updates_per_s"),
        ({"max_updates_per_s": -4}, "max_updates_per_s"),
        ({"max_updates_per_s": math.inf}, "max_updates_per_s"),
    ],
)
def test_constructor_arguments_are_checked(kwargs, field):
    with pytest.raises(ValueError, match=field):
        LossPlot(**kwargs)


def test_one_run_has_a_colour_per_split_and_several_runs_a_colour_per_run():
    plot = LossPlot()
    _fit(plot, "a", 10, evals=("val", "test"))
    plot.on_eval({"step": 10, "split": "val", "loss": 0.4, "accuracy": 0.9, "f1": 0.8})
    plot.flush()
    colours = {name: _trace(plot, f"a {name}").line.color for name in ("train", "val", "test")}
    assert len(set(colours.values())) == 3  # train, val and test tell apart at a glance
    metric_colours = {_trace(plot, f"a val {name}").line.color for name in ("accuracy", "f1")}
    assert metric_colours == {colours["val"]}  # in its own panel, a metric wears its split's colour
    _fit(plot, "b", 10, evals=("val",))  # a second run: each run its own colour, splits by line style
    assert _trace(plot, "a val").line.color == _trace(plot, "a train").line.color
    assert _trace(plot, "a train").line.color != _trace(plot, "b train").line.color
    assert _trace(plot, "a val").line.dash == "dash"
    assert _trace(plot, "a train raw").line.color == _trace(plot, "a train").line.color


def test_rank_curves_each_have_a_colour_and_are_smoothed_with_the_raw_faint_behind():
    plot = LossPlot()
    plot.on_fit_start({"run": "ddp", "start_step": 0})
    for step in range(1, 21):
        for rank in range(3):
            loss = 1.0 + rank + (0.5 if step % 2 else -0.5)  # noisy: alternates around its mean
            plot.on_step({"step": step, "loss": 2.0, "rank_loss": loss, "rank": rank})
    plot.on_fit_end({"status": "finished"})
    ranks = [_trace(plot, f"ddp rank {rank}") for rank in range(3)]
    assert len({trace.line.color for trace in ranks}) == 3
    raw = _trace(plot, "ddp rank 1 raw")
    assert raw.visible and raw.opacity < 0.5 and raw.showlegend is False
    assert max(ranks[1].y[5:]) - min(ranks[1].y[5:]) < 0.5 * (max(raw.y) - min(raw.y))


def test_the_smoothing_slider_redraws_the_curves_and_zero_shows_the_raw_values():
    plot = LossPlot(smoothing=0.9)
    _fit(plot, "s", 30, loss=lambda step: float(step % 2))
    smoothed = list(_trace(plot, "s train").y)
    plot.smoothing_slider.value = 0.0  # what dragging the slider does
    assert list(_trace(plot, "s train").y) == [float(step % 2) for step in range(1, 31)] != smoothed
    assert _trace(plot, "s train raw").visible is False
    with pytest.raises(ValueError, match=r"smoothing must be in \[0, 1\)"):
        LossPlot(smoothing=1.0)


def test_a_plot_drawn_before_it_is_shown_opens_in_the_browser_with_its_curves():
    """Shown inside a VBox, plotly's FigureWidget never refreshed the state a browser view starts from: a
    plot filled before its cell ended opened empty (seen in the browser test of notebook 02)."""
    plot = LossPlot()
    plot.plot_history("a", EVENTS)
    plot.plot_history("b", EVENTS)  # the second run restyles the first: edits a new view must not replay
    assert plot.figure._widget_data == []  # what a view would start from without the fix
    plot._repr_mimebundle_()
    shown = [trace["meta"] for trace in plot.figure._widget_data]
    assert shown == [trace.meta for trace in plot.figure.data] and "a train" in shown
    title = plot.figure._widget_layout["title"]["text"]  # the runs' NaN losses (one each) said in it too
    assert (
        title
        == plot.figure.layout.title.text
        == "Loss · 2 values not finite (NaN or inf), not drawn: a train from step 2"
    )
