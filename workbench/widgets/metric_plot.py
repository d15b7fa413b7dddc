"""Every other number a run logs, one at a time against step, picked from a dropdown.

The `LossPlot` draws the losses; this draws the rest: the learning rate, the gradient norm, each rank's
samples/s, the evaluation metrics (accuracy, F1, yours), and any numeric field a strategy adds to its step
events. The dropdown lists each metric as it first appears.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import plotly.colors

from workbench._validate import check_int
from workbench.train.events import Callback, Event, evaluation_metrics
from workbench.widgets._figure_widget import FigureWidget
from workbench.widgets._kernel import acknowledge_widget_message
from workbench.widgets.live_figure import MIN_HEIGHT, TEMPLATE, LiveFigure
from workbench.widgets.series import DownsampledSeries

_NOT_METRICS = {"step", "epoch", "rank", "time", "loss", "rank_loss"}  # the LossPlot draws the losses
_PER_RANK = {"samples_per_s"}  # differ between ranks; the others are the same on every rank: rank 0's
_LABELS = {
    "lr": "learning rate",
    "grad_norm": "gradient norm (before clipping)",
    "samples_per_s": "samples/s",
}


def metric_label(name: str) -> str:
    """What the views call a logged metric: ``grad_norm`` → "gradient norm (before clipping)", ``val f1``
    as it is, other underscores as spaces."""
    split, _, rest = name.partition(" ") if name.startswith(("val ", "test ", "train ")) else ("", "", name)
    label = _LABELS.get(rest, rest.replace("_", " "))
    return f"{split} {label}" if split else label


_RANK_COLORS = plotly.colors.qualitative.Plotly


class MetricPlot(LiveFigure, Callback):
    """One metric of the current run against step, chosen in the "metric" dropdown.

    Step events give the learning rate, gradient norm and samples/s (a curve per rank under data
    parallel) and any other numeric field; evaluation events give ``val accuracy``, ``test f1``... A
    fresh fit (``start_step`` 0) starts the curves over; a resumed one goes on from its step (the points
    past it, which it redoes, are dropped). Events only append; a timer thread redraws.

    Args:
        max_points: the most points drawn per curve (≥ 2).
        max_updates_per_s: the most redraws per second (> 0).
        height: figure height in pixels.

    Example:
        >>> plot = MetricPlot()
        >>> plot.on_fit_start({"start_step": 0})
        >>> for step in range(1, 11):
        ...     plot.on_step({"step": step, "loss": 1.0, "lr": 0.1 / step, "grad_norm": 2.0, "rank": 0})
        >>> plot.on_eval({"step": 10, "split": "val", "loss": 0.5, "accuracy": 0.9})
        >>> plot.on_fit_end({"status": "finished"})
        >>> plot.metrics, plot.selector.value
        (['lr', 'grad_norm', 'val accuracy'], 'lr')
        >>> plot.selector.value = "val accuracy"
        >>> plot.point_counts()
        {'val accuracy': 1}
    """

    def __init__(self, *, max_points: int = 1000, max_updates_per_s: float = 2, height: int = 280) -> None:
        self.max_points = check_int("max_points", max_points, minimum=2)
        check_int("height", height, minimum=MIN_HEIGHT)
        figure = FigureWidget(
            layout={
                "height": height,
                "title": {"text": "Metrics", "x": 0.01, "y": 0.97, "font": {"size": 15}},
                "margin": {"l": 60, "r": 20, "t": 35, "b": 40},
                "xaxis": {"title": {"text": "optimizer step"}},
                "yaxis": {"tickformat": ".3~g"},
                "legend": {"orientation": "h", "x": 0, "y": -0.25, "yanchor": "top"},
                "uirevision": "metrics",
                "template": TEMPLATE,
            }
        )
        self.selector = widgets.Dropdown(
            options=[], description="metric", layout=widgets.Layout(width="360px")
        )
        super().__init__(figure, max_updates_per_s=max_updates_per_s, controls=[self.selector])
        self.selector.observe(self._on_select, names="value")
        # under _data_lock:
        self._series: dict[str, dict[int, DownsampledSeries]] = {}  # metric → rank → series
        self._changed: set[str] = set()
        self._new_metrics = False
        # under _figure_lock:
        self._shown: str | None = None  # the metric the traces hold
        self._choosing = False  # True while `_update_options` sets the dropdown itself

    def __repr__(self) -> str:
        return f"MetricPlot({', '.join(self.metrics) or 'no metrics yet'})"

    @property
    def metrics(self) -> list[str]:
        """The metrics seen so far, in the order they first came."""
        with self._data_lock:
            return list(self._series)

    # ------------------------------------------------------------------ events

    def on_fit_start(self, info: Event) -> None:
        start = info.get("start_step", 0)
        with self._data_lock:
            if start == 0:
                self._series, self._changed, self._new_metrics = {}, set(), True
            for metric, ranks in self._series.items():  # a resume redoes the steps after its checkpoint's
                for series in ranks.values():
                    series.drop_after(start)
                self._changed.add(metric)
        self._throttle.start()

    def on_step(self, metrics: Event) -> None:
        rank = metrics.get("rank", 0)
        values = {
            key: value
            for key, value in metrics.items()
            if key not in _NOT_METRICS
            and isinstance(value, int | float)
            and not isinstance(value, bool)
            and (rank == 0 or key in _PER_RANK)
        }
        if values:
            self._append(metrics["step"], rank, values)

    def on_eval(self, metrics: Event) -> None:
        split = metrics.get("split")
        values = {f"{split} {k}": v for k, v in evaluation_metrics(metrics).items() if k != "loss"}
        if values and split in ("val", "test"):
            self._append(metrics["step"], 0, values)

    def on_fit_end(self, summary: Event) -> None:
        self._stop_and_flush()

    def _append(self, step: int, rank: int, values: dict[str, float]) -> None:
        with self._data_lock:
            for key, value in values.items():
                ranks = self._series.get(key)
                if ranks is None:
                    ranks = self._series[key] = {}
                    self._new_metrics = True
                series = ranks.get(rank)
                if series is None:
                    series = ranks[rank] = DownsampledSeries(self.max_points)
                series.append(step, value)
                self._changed.add(key)
        self._throttle.poke()

    # ------------------------------------------------------------------ drawing

    def _draw(self) -> None:
        with self._figure_lock:
            with self._data_lock:
                new_metrics, self._new_metrics = self._new_metrics, False
                names = list(self._series)
                changed, self._changed = self._changed, set()
            if new_metrics:
                self._update_options(names)
            shown = self.selector.value
            if shown is None or (shown == self._shown and shown not in changed):
                return
            with self._data_lock:
                curves = {
                    rank: series.points() for rank, series in sorted(self._series.get(shown, {}).items())
                }
            self._draw_metric(shown, curves)

    def _update_options(self, names: list[str]) -> None:
        """The dropdown lists `names`; the choice stays (or becomes the first metric)."""
        current = self.selector.value
        self._choosing = True  # our own change, not a click: nothing to acknowledge
        self.selector.options = [(metric_label(name), name) for name in names]
        if current in names:
            self.selector.value = current
        elif names:
            self.selector.value = names[0]
        self._choosing = False

    def _draw_metric(self, name: str, curves: dict[int, tuple[Any, Any]]) -> None:
        label = metric_label(name)
        several = len(curves) > 1
        with self.figure.batch_update():
            if name != self._shown or len(self.figure.data) != len(curves):
                self.figure.data = []
                for rank in curves:
                    color = _RANK_COLORS[rank % len(_RANK_COLORS)]
                    trace_name = f"rank {rank}" if several else label
                    self.figure.add_scatter(
                        name=trace_name,
                        mode="lines+markers" if name.startswith(("val ", "test ")) else "lines",
                        line={"color": color, "width": 1.5 if several else 2},
                        showlegend=several,
                        hovertemplate=f"{trace_name}<br>step %{{x:.0f}}<br>%{{y:.4g}}<extra></extra>",
                    )
                self.figure.layout.title.text = label
                self.figure.layout.yaxis.title.text = label
                self._shown = name
            for trace, (x, y) in zip(self.figure.data, curves.values(), strict=True):
                trace.x, trace.y = x, y
            flat = _flat_range([y for _, y in curves.values()])
            if flat is None:
                self.figure.layout.yaxis.autorange = True
            else:
                self.figure.layout.yaxis.range = flat  # turns autorange off

    def _on_select(self, change: dict[str, Any]) -> None:
        if change["new"] is not None and change["new"] != self._shown:
            with self._figure_lock:
                self._shown = None  # redraw the new choice
            self.flush()
        if not self._choosing:
            acknowledge_widget_message(self.awaiting_cell)


def _flat_range(curves: list[Any]) -> list[float] | None:
    """A y range for a metric that never changed (a constant lr): [0, 2c] rather than plotly's c ± 1, which
    puts a small value on the zero line; None (autorange) otherwise."""
    values = [float(v) for y in curves for v in y]
    if not values or max(values) - min(values) > 1e-9 * max(1e-30, abs(max(values))):
        return None
    value = values[0]
    return [0.0, 2 * value] if value > 0 else [2 * value, 0.0] if value < 0 else [-1.0, 1.0]
