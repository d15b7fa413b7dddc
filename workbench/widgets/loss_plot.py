"""Live loss curves for one or more runs: a plotly FigureWidget fed by training events, redrawn ≤ 4×/s.

The loss has its own panel; each evaluation metric other than the loss (accuracy, F1, your own) gets a small
panel below it, three to a row (`panels`). One run: train, val and test each have a colour (blue, orange,
green) in every panel. Several runs: each run has a colour, train is solid, val dashed with markers, test
markers. The legend names only what differs (`curve_style.legend_entry`). Noisy curves (train,
each rank's) are drawn smoothed (an EMA, the "smoothing" slider) with the raw curve faint behind. Events
only append to a `DownsampledSeries` (about a microsecond); a `Throttle` timer thread redraws the figure
from those series, so history length never slows training or the browser.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets

from workbench._smoothing import ema
from workbench._validate import check_int
from workbench.train.events import Callback, Event, evaluation_metrics
from workbench.train.metrics_log import read_metrics
from workbench.widgets._figure_widget import FigureWidget
from workbench.widgets._kernel import acknowledge_widget_message
from workbench.widgets.curve_style import (
    RAW_OPACITY,
    RUN_COLORS,
    SPLITS,
    curve_order,
    curve_style,
    legend_entry,
    restyle,
    smoothed,
)
from workbench.widgets.live_figure import MIN_HEIGHT, TEMPLATE, LiveFigure
from workbench.widgets.metric_plot import metric_label
from workbench.widgets.panels import MARGIN, legend_layout, panel_layout
from workbench.widgets.series import DownsampledSeries


@dataclass
class _Run:
    name: str
    color: str
    series: dict[str, DownsampledSeries]


class LossPlot(LiveFigure, Callback):
    """Train/val/test loss against step for one or more runs, drawn live while a `Trainer` runs, and a
    panel per evaluation metric.

    Subscribe it to a trainer (``Trainer(..., callbacks=[plot])`` or ``trainer.add_callback(plot)``) and
    show it by ending a cell with ``plot``; in a loop of your own, call ``plot.log(step, loss=...)``. Each
    ``on_fit_start`` begins the run named by its ``run`` key (``"run 1"``, ``"run 2"``… when None); a
    resumed fit (``start_step > 0``) continues its curves from that step (the points past it, which it
    redoes, are dropped), a fresh fit under the same name starts them over. `plot_history` adds a finished
    run from its log.

    The training thread only appends to bounded series; a timer thread redraws the figure at most
    `max_updates_per_s` times a second, and ``on_fit_end`` (or `flush`) draws the final state.

    Args:
        max_points: the most points drawn per curve (older points are merged into means, ≥ 2).
        max_updates_per_s: the most redraws per second while training (> 0).
        log_y: start with a logarithmic loss axis (the "log y" toggle switches it).
        smoothing: EMA weight in [0, 1) for the train and per-rank curves (the "smoothing" slider; 0: raw).
        height: the loss panel's height in pixels; each row of metric panels adds 200.

    Example:
        >>> plot = LossPlot()
        >>> plot.on_fit_start({"run": "sgd", "start_step": 0})
        >>> for step in range(1, 47):
        ...     plot.on_step({"step": step, "loss": 1 / step})
        >>> plot.on_eval({"step": 46, "split": "val", "loss": 0.05})
        >>> plot.on_fit_end({"status": "finished"})
        >>> plot.point_counts()
        {'sgd train': 46, 'sgd val': 1}
    """

    def __init__(
        self,
        *,
        max_points: int = 1000,
        max_updates_per_s: float = 4,
        log_y: bool = False,
        smoothing: float = 0.6,
        height: int = 420,
    ) -> None:
        self.max_points = check_int("max_points", max_points, minimum=2)
        check_int("height", height, minimum=MIN_HEIGHT)
        ema([], smoothing)  # checks it
        self._loss_height = height
        layout = panel_layout([], loss_height=height)
        layout["yaxis"].update(title={"text": "loss"}, type="log" if log_y else "linear")
        figure = FigureWidget(
            layout={
                **layout,
                "title": {"text": "Loss", "x": 0.01, "y": 0.98, "font": {"size": 15}},
                "margin": MARGIN,
                "legend": legend_layout(several_runs=False),
                "uirevision": "loss",  # keep the user's zoom across redraws
                "template": TEMPLATE,
            }
        )
        self.log_toggle = widgets.ToggleButton(
            value=log_y, description="log y", icon="line-chart", tooltip="logarithmic loss axis"
        )
        self.smoothing_slider = widgets.FloatSlider(
            value=smoothing,
            min=0.0,
            max=0.99,
            step=0.01,
            description="smoothing",
            continuous_update=False,
            tooltip="EMA weight for the train and per-rank curves (0: raw); the raw curve stays faint behind",
        )
        self.log_toggle.observe(self._on_log_toggle, names="value")
        self.smoothing_slider.observe(self._on_smoothing, names="value")
        controls = widgets.HBox([self.log_toggle, self.smoothing_slider])
        super().__init__(figure, max_updates_per_s=max_updates_per_s, controls=[controls])
        # under _data_lock:
        self._runs: dict[str, _Run] = {}
        self._current: _Run | None = None
        self._changed: set[tuple[str, str]] = set()  # (run, split) appended to since the last draw
        self._metric_names: dict[str, int] = {}  # evaluation metric → its colour's index
        # under _figure_lock:
        self._traces: dict[tuple[str, str], Any] = {}
        self._raw_traces: dict[tuple[str, str], Any] = {}  # the faint unsmoothed curve behind a smoothed one
        self._several_runs_drawn = False  # the colour scheme the traces have now
        self._panels_drawn = 0  # metric panels laid out in the figure
        self._not_finite_drawn = ""  # in the title: how many values were not finite (not drawn)

    def __repr__(self) -> str:
        counts = ", ".join(f"{name}: {count}" for name, count in self.point_counts().items())
        not_finite = f"; {self._not_finite_drawn}" if self._not_finite_drawn else ""
        return f"LossPlot({counts or 'no data yet'}{not_finite})"

    @property
    def runs(self) -> list[str]:
        """Names of the runs plotted, in the order they began."""
        with self._data_lock:
            return list(self._runs)

    def new_run(self, name: str | None = None) -> str:
        """Start (or start over) run `name` and send the next events to it; returns its name."""
        with self._data_lock:
            self._current = self._begin(name, fresh=True)
            name = self._current.name
        self._throttle.poke()
        return name

    def plot_history(self, name: str, events: Iterable[Event] | str | os.PathLike) -> None:
        """Draw a finished run from its events, or from its run directory's ``metrics.jsonl``.

        `events` are dicts as `MetricsLog` writes them (``{"event": "step", "step": 3, "loss": …}``);
        events without an ``"event"`` key count as evaluations when they have a ``"split"``, else as
        steps. A run already called `name` is replaced. The live run (if any) is not disturbed.
        """
        if isinstance(events, str | os.PathLike):
            events = read_metrics(events)
        xs: dict[str, list[Any]] = {split: [] for split in SPLITS}
        ys: dict[str, list[Any]] = {split: [] for split in SPLITS}
        for event in events:
            kind = event.get("event") or ("eval" if "split" in event else "step")
            if kind == "step":
                split = "train"
            elif kind == "eval" and event.get("split") in ("val", "test"):
                split = event["split"]
            else:
                continue  # fit_start, fit_end, an evaluation of the train split
            if "loss" in event:
                xs[split].append(event["step"])
                ys[split].append(event["loss"])
        with self._data_lock:
            run = self._begin(name, fresh=True)
            for split in SPLITS:
                run.series[split].extend(xs[split], ys[split])
        self.flush()

    def log(self, step: int, loss: float | None = None, **metrics: float) -> None:
        """Plot values of a loop you wrote yourself, at optimizer step `step`.

        ``loss`` is the training loss; ``val_loss``/``test_loss`` are evaluation losses; any other
        ``val_<name>``/``test_<name>`` (or a bare ``<name>``, counted as val) is an evaluation metric, drawn
        in a panel of its own. Tensors are fine (one ``.item()`` each). Cheap: it only appends; the figure
        redraws on its own timer, and `flush` draws everything now (e.g. after the loop).

        Example:
            >>> plot = LossPlot()
            >>> for step in range(1, 101):
            ...     plot.log(step, loss=1 / step)
            ...     if step % 50 == 0:
            ...         plot.log(step, val_loss=1.5 / step, accuracy=step / 100)
            >>> plot.flush()
            >>> plot.point_counts()
            {'run 1 train': 100, 'run 1 val': 2, 'run 1 val accuracy': 2}
        """
        step = check_int("step", step, minimum=0)
        values = {"loss": loss, **metrics}
        evaluations: dict[str, dict[str, float]] = {}
        for key, value in values.items():
            if value is None:
                continue
            value = _number(key, value)
            if key == "loss":
                self.on_step({"step": step, "loss": value})
                continue
            split, _, name = key.partition("_") if key.startswith(("val_", "test_")) else ("val", "", key)
            evaluations.setdefault(split, {})[name] = value
        for split, found in evaluations.items():
            self.on_eval({"step": step, "split": split, **found})
        self._throttle.start()

    # ------------------------------------------------------------------ events (training thread)

    def on_fit_start(self, info: Event) -> None:
        start = info.get("start_step", 0)
        with self._data_lock:
            self._current = run = self._begin(info.get("run"), fresh=start == 0)
            for curve, series in run.series.items():  # a resume redoes the steps after its checkpoint's
                series.drop_after(start)
                self._changed.add((run.name, curve))
        self._throttle.start()

    def on_step(self, metrics: Event) -> None:
        rank = metrics.get("rank", 0)
        with self._data_lock:
            run = self._current if self._current is not None else self._start_default_run()
            if rank == 0:  # `loss` is the same on every rank (the mean over ranks)
                run.series["train"].append(metrics["step"], metrics["loss"])
                self._changed.add((run.name, "train"))
            if "rank_loss" in metrics:  # data parallel: each rank's own loss, a thin curve per rank
                curve = f"rank {rank}"
                if curve not in run.series:
                    run.series[curve] = DownsampledSeries(self.max_points)
                run.series[curve].append(metrics["step"], metrics["rank_loss"])
                self._changed.add((run.name, curve))
        self._throttle.poke()

    def on_eval(self, metrics: Event) -> None:
        split = metrics.get("split")
        if split not in ("val", "test"):
            return
        values = evaluation_metrics(metrics)
        if not values:
            return
        with self._data_lock:
            run = self._current if self._current is not None else self._start_default_run()
            for name, value in values.items():
                if name != "loss":
                    self._metric_names.setdefault(name, len(self._metric_names))
                curve = split if name == "loss" else f"{split} {name}"
                if curve not in run.series:
                    run.series[curve] = DownsampledSeries(self.max_points)
                run.series[curve].append(metrics["step"], value)
                self._changed.add((run.name, curve))
        self._throttle.poke()

    def on_fit_end(self, summary: Event) -> None:
        self._stop_and_flush()

    # ------------------------------------------------------------------ internals

    def _start_default_run(self) -> _Run:
        """Events arrived without ``on_fit_start``: plot them as a new unnamed run (data lock held)."""
        self._current = self._begin(None, fresh=True)
        return self._current

    def _begin(self, name: str | None, *, fresh: bool) -> _Run:
        """The run called `name` (a new "run N" when None); empty its curves if `fresh` (data lock held)."""
        if name is None:
            number = len(self._runs) + 1
            while f"run {number}" in self._runs:
                number += 1
            name = f"run {number}"
        run = self._runs.get(name)
        if run is None:
            run = _Run(name, RUN_COLORS[len(self._runs) % len(RUN_COLORS)], {})
            self._runs[name] = run
        if fresh or not run.series:
            run.series = {split: DownsampledSeries(self.max_points) for split in SPLITS}
            self._changed.update((name, split) for split in SPLITS)
        return run

    @property
    def smoothing(self) -> float:
        """The EMA weight applied to the train and per-rank curves now (the slider's value)."""
        return float(self.smoothing_slider.value)

    def point_counts(self) -> dict[str, int]:
        """Curve ("run split", "run rank 1", "run val accuracy") → number of points drawn (the faint raw
        copies of smoothed curves not counted). The legend may say less ("val"): curves carry these names as
        their ``meta``."""
        with self._figure_lock:
            return {
                trace.meta: 0 if trace.x is None else len(trace.x)
                for trace in self.figure.data
                if trace.meta != "raw"
            }

    def _draw(self) -> None:
        """Copy the changed curves (under the data lock, O(max_points) each) and send them to the figure."""
        with self._figure_lock:
            with self._data_lock:
                several = len(self._runs) > 1
                if several != self._several_runs_drawn:  # the second run came: colours go by run now
                    self._changed.update(self._traces)
                changed, self._changed = self._changed, set()
                curves = [
                    (self._runs[name], split, *self._runs[name].series[split].points())
                    for name, split in changed
                    if name in self._runs and split in self._runs[name].series
                ]
                metric_names = dict(self._metric_names)
                not_finite = _not_finite(self._runs.values())
            if not curves:
                return
            panels = sorted(metric_names, key=metric_names.__getitem__)
            order = {name: i for i, name in enumerate(self._runs)}
            curves.sort(key=lambda c: (order[c[0].name], curve_order(c[1])))
            smoothing = self.smoothing
            with self.figure.batch_update():
                if len(panels) != self._panels_drawn:  # a new metric: its panel, the figure a row taller
                    titles = [metric_label(name) for name in panels]
                    self.figure.update_layout(panel_layout(titles, loss_height=self._loss_height))
                    self._panels_drawn = len(panels)
                if several != self._several_runs_drawn:
                    self.figure.update_layout(legend=legend_layout(several_runs=several))
                for run, split, x, y in curves:
                    style = curve_style(run.color, split, several=several, metric_names=metric_names)
                    legend = legend_entry(run.name, split, several=several)
                    trace = self._traces.get((run.name, split))
                    if trace is None:
                        if len(x) == 0:
                            continue
                        trace = self._add_trace(run, split, style, legend)
                    elif several != self._several_runs_drawn:
                        restyle(trace, style, legend)
                    if smoothed(split):
                        self._draw_smoothed(run, split, style, legend["legendgroup"], trace, x, y, smoothing)
                    else:
                        trace.x, trace.y = x, y
                self._several_runs_drawn = several
                if not_finite != self._not_finite_drawn:
                    self._not_finite_drawn = not_finite
                    self.figure.layout.title.text = f"Loss · {not_finite}" if not_finite else "Loss"

    def _draw_smoothed(
        self,
        run: _Run,
        split: str,
        style: dict[str, Any],
        group: str,
        trace: Any,
        x: Any,
        y: Any,
        smoothing: float,
    ) -> None:
        """The curve smoothed in `trace`, and the raw one faint behind it (hidden at smoothing 0; it hides
        with its curve's legend `group`)."""
        raw = self._raw_traces.get((run.name, split))
        if raw is None:
            self.figure.add_scatter(
                name=f"{run.name} {split} raw",
                meta="raw",
                legendgroup=group,
                showlegend=False,
                mode="lines",
                line={"color": style["color"], "width": 1},
                opacity=RAW_OPACITY,
                hoverinfo="skip",
            )
            raw = self.figure.data[-1]
            self._raw_traces[(run.name, split)] = raw
        else:
            raw.line.color, raw.legendgroup = style["color"], group
        raw.visible = smoothing > 0
        raw.x, raw.y = x, y
        trace.x, trace.y = x, ema(y, smoothing)

    def _add_trace(self, run: _Run, split: str, style: dict[str, Any], legend: dict[str, Any]) -> Any:
        self.figure.add_scatter(
            meta=f"{run.name} {split}",
            xaxis=style["xaxis"],
            yaxis=style["yaxis"],
            hovertemplate=f"{run.name} {split}<br>step %{{x:.0f}}<br>%{{y:.4g}}<extra></extra>",
        )
        trace = self.figure.data[-1]
        restyle(trace, style, legend)
        self._traces[(run.name, split)] = trace
        return trace

    def _on_log_toggle(self, change: dict[str, Any]) -> None:
        axis_type = "log" if change["new"] else "linear"
        with self._figure_lock, self.figure.batch_update():
            self.figure.layout.yaxis.type = axis_type
            self.figure.layout.yaxis.uirevision = axis_type  # drop a zoom taken on the other scale
        acknowledge_widget_message(self.awaiting_cell)

    def _on_smoothing(self, change: dict[str, Any]) -> None:
        with self._data_lock:
            self._changed.update(key for key in self._traces if smoothed(key[1]))
        self.flush()
        acknowledge_widget_message(self.awaiting_cell)


def _not_finite(runs: Iterable[_Run]) -> str:
    """How many logged values were not finite (NaN or inf: not drawn), and where the first was; "" if none."""
    dropped = [(f"{run.name} {split}", s) for run in runs for split, s in run.series.items() if s.dropped]
    if not dropped:
        return ""
    total = sum(series.dropped for _, series in dropped)
    curve, first = dropped[0]
    where = f"{curve} from step {first.first_dropped_x:g}"
    return f"{total} value{'s' * (total > 1)} not finite (NaN or inf), not drawn: {where}"


def _number(key: str, value: Any) -> float:
    """`value` as a float (a one-element tensor or array is fine); ValueError naming `key` otherwise."""
    try:
        return float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):
        shown = f"a tensor of shape {tuple(value.shape)}" if hasattr(value, "shape") else repr(value)
        raise ValueError(
            f"LossPlot.log: {key} must be a number (or a one-element tensor), got {shown:.80}"
        ) from None
