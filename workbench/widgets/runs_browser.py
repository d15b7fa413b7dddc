"""Compare runs in the notebook: the runs under a runs directory as a table, any logged metric of the ones
you select overlaid, and the config fields that differ between them.

The numbers come from `workbench.train.runs` (the runs' own ``metrics.jsonl`` and ``config.json``); this
only draws. `workbench runs` prints the same table in a terminal.
"""

from __future__ import annotations

import html
import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import plotly.colors

from workbench._smoothing import ema
from workbench._validate import check_positive
from workbench.tables import html_table
from workbench.train.metrics_log import METRICS_FILE
from workbench.train.runs import (
    RUN_COLUMNS,
    Events,
    RunSummary,
    config_diff,
    list_runs,
    metric_names,
    metric_series,
    read_run,
)
from workbench.widgets._display import sync_figure_for_display, widget_bundle
from workbench.widgets._figure_widget import FigureWidget
from workbench.widgets._kernel import acknowledge_widget_message
from workbench.widgets.metric_plot import metric_label

_COLORS = plotly.colors.qualitative.Plotly


def _best_first(run: RunSummary) -> tuple[bool, float]:
    """Sort key: the best validation result first (the highest accuracy, else the lowest loss)."""
    if run.best is None:
        return (True, 0.0)
    name, value = run.best
    return (False, -value if name == "accuracy" else value)


_SORT_KEYS = {
    "started": lambda r: (r.started is None, r.started or 0.0),
    "run": lambda r: r.name,
    "status": lambda r: r.status,
    "steps": lambda r: -r.steps,
    "best val": _best_first,
    "wall time": lambda r: (r.wall_s is None, r.wall_s or 0.0),
}


class RunsBrowser:
    """The runs under `runs_dir`: a sortable table, a metric of the selected runs overlaid, their config diff.

    Select runs in the list (shift/ctrl-click for several), pick the metric (losses, lr, samples/s,
    evaluation metrics: whatever the runs logged) and the x axis (step or wall-clock seconds); the smoothing
    slider works as on the dashboard (raw curves faint behind). Refresh re-reads the directory (a run still
    training shows as running, one whose process died as killed).

    Args:
        runs_dir: the directory holding one folder per run (``Trainer(..., runs_dir=)``, default ``runs``).
        select: names of runs to select at the start (default: the latest three).
        metric: the metric to show first (default ``loss``).
        smoothing: the EMA weight in [0, 1) for the curves.
        follow_s: while a selected run is still training, re-read the logs this often (seconds; the
            "follow running runs" box turns it off). A line cut short mid-write waits for the next read.

    Example:
        >>> import tempfile
        >>> from workbench.presets import build_experiment
        >>> from workbench.train import Trainer
        >>> runs = tempfile.mkdtemp()
        >>> for lr in (0.01, 0.003):
        ...     e = build_experiment("digits-mlp", epochs=1, lr=lr)
        ...     _ = Trainer(e.model, e.loss_fn, e.splits, e.config, run=f"lr={lr}", runs_dir=runs).fit()
        >>> browser = RunsBrowser(runs)
        >>> browser.selected, browser.point_counts()
        (['lr=0.01', 'lr=0.003'], {'lr=0.01': 3, 'lr=0.003': 3})
        >>> browser.diff()
        {'optimizer.lr': [0.01, 0.003]}
    """

    def __init__(
        self,
        runs_dir: str | os.PathLike = "runs",
        *,
        select: Sequence[str] | None = None,
        metric: str = "loss",
        smoothing: float = 0.0,
        follow_s: float = 2.0,
    ) -> None:
        ema([], smoothing)  # checks it
        self.follow_s = check_positive("follow_s", follow_s)
        self.follow = widgets.Checkbox(value=True, description="follow running runs", indent=False)
        self._lock = threading.RLock()  # a refresh from the follow thread and one from a click take turns
        self._follower: threading.Thread | None = None
        self.runs_dir = Path(runs_dir).expanduser()
        self.runs: list[RunSummary] = []
        self._logs: dict[Path, tuple[tuple[int, int], Events]] = {}  # run dir → (log mtime+size, events)
        self.sort = widgets.Dropdown(options=list(_SORT_KEYS), value="started", description="sort by")
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.table = widgets.HTML(layout=_SCROLLS)
        self.chooser = widgets.SelectMultiple(options=[], description="runs", rows=6)
        self.metric = widgets.Dropdown(options=[metric], value=metric, description="metric")
        self.x_axis = widgets.ToggleButtons(options=["step", "time"], value="step", description="x")
        self.smoothing = widgets.FloatSlider(
            value=smoothing, min=0.0, max=0.99, step=0.01, description="smoothing", continuous_update=False
        )
        self.diff_view = widgets.HTML(layout=_SCROLLS)
        self.figure = FigureWidget(
            layout={
                "height": 380,
                "title": {"text": "", "x": 0.01},
                "margin": {"l": 60, "r": 20, "t": 35, "b": 40},
                "legend": {"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
                "template": "plotly_white",
                "uirevision": "runs",
            }
        )
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.sort, self.refresh_button, self.follow]),
                self.table,
                self.chooser,
                widgets.HBox([self.metric, self.x_axis, self.smoothing]),
                self.figure,
                self.diff_view,
            ]
        )
        self.widget.add_class("workbench-runs")
        self.refresh_button.on_click(lambda _: self.refresh())
        for control in (self.sort, self.chooser, self.metric, self.x_axis, self.smoothing, self.follow):
            control.observe(self._on_change, names="value")
        self._drawing = False
        self.refresh(select=select)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        sync_figure_for_display(self.figure)
        return widget_bundle(self.widget, repr(self), **kwargs)

    def __repr__(self) -> str:
        selected = ", ".join(self.selected) or "none"
        return f"RunsBrowser({self.runs_dir}: {len(self.runs)} runs, selected {selected})"

    @property
    def selected(self) -> list[str]:
        """The names of the selected runs."""
        return list(self.chooser.value)

    def select(self, names: Sequence[str]) -> None:
        """Select the runs called `names` (what shift-clicking them in the list does)."""
        known = {run.name for run in self.runs}
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ValueError(f"no run {unknown[0]!r} in {self.runs_dir}; runs: {', '.join(sorted(known))}")
        self.chooser.value = tuple(names)

    def refresh(self, select: Sequence[str] | None = None) -> None:
        """Read the runs directory again (keeps the selection, or selects `select`)."""
        with self._lock:
            self._refresh(select)
        self._follow_running()

    @property
    def following(self) -> bool:
        """True while a thread re-reads the logs of selected runs that are still training."""
        return self._follower is not None and self._follower.is_alive()

    def _follow_running(self) -> None:
        """Start the follow thread when a selected run is running (it ends when none is)."""
        if self.following or not self.follow.value or not self._running_selected():
            return
        self._follower = threading.Thread(target=self._follow_loop, name="workbench-runs", daemon=True)
        self._follower.start()

    def _follow_loop(self) -> None:
        while self.follow.value and self._running_selected():
            time.sleep(self.follow_s)
            with self._lock:
                self._refresh(None)

    def _running_selected(self) -> bool:
        selected = set(self.selected)
        return any(run.status == "running" and run.name in selected for run in self.runs)

    def _refresh(self, select: Sequence[str] | None) -> None:
        self.runs = list_runs(self.runs_dir, read=self._read) if self.runs_dir.is_dir() else []
        keep = self.selected if select is None else list(select)
        if not keep and select is None:
            keep = [run.name for run in self.runs[-3:]]
        self._drawing = True
        try:
            self._show_table()
            names = [run.name for run in self._sorted()]
            self.chooser.options = names
            self.chooser.value = tuple(name for name in keep if name in names)
        finally:
            self._drawing = False
        self._draw()

    def diff(self) -> dict[str, list[Any]]:
        """The config fields that differ between the selected runs (their values in selection order)."""
        by_name = {run.name: run for run in self.runs}
        return config_diff([by_name[name] for name in self.selected])

    def point_counts(self) -> dict[str, int]:
        """Run → points drawn of the current metric (the raw curves behind smoothed ones not counted)."""
        with self._lock:  # not halfway through a redraw by the follow thread
            return {t.name: len(t.x) for t in self.figure.data if t.meta != "raw" and t.x is not None}

    # ------------------------------------------------------------------ drawing

    def _on_change(self, change: dict[str, Any]) -> None:
        if change["owner"] is not self.follow and not self._drawing:
            with self._lock:
                if change["owner"] is self.sort:
                    self._drawing = True
                    try:
                        self._show_table()
                        keep = self.chooser.value
                        self.chooser.options = [run.name for run in self._sorted()]
                        self.chooser.value = keep
                    finally:
                        self._drawing = False
                self._draw()
        self._follow_running()  # a running run selected, or following turned back on
        acknowledge_widget_message(None)

    def _read(self, path: Path) -> Events:
        """A run's events, read again only when its log changed (size or modification time)."""
        log = (path / METRICS_FILE).stat()
        stamp = (log.st_mtime_ns, log.st_size)
        cached = self._logs.get(path)
        if cached is None or cached[0] != stamp:
            cached = self._logs[path] = (stamp, read_run(path))
        return cached[1]

    def _sorted(self) -> list[RunSummary]:
        return sorted(self.runs, key=_SORT_KEYS[self.sort.value])

    def _show_table(self) -> None:
        if not self.runs:
            self.table.value = f"<i>no runs in {html.escape(str(self.runs_dir))} yet</i>"
            return
        rows = [run.row() for run in self._sorted()]
        self.table.value = html_table(RUN_COLUMNS, rows, cell_style=CELL)

    def _draw(self) -> None:
        by_name = {run.name: run for run in self.runs}
        chosen = [by_name[name] for name in self.selected if name in by_name]
        names = list(dict.fromkeys(name for run in chosen for name in metric_names(self._read(run.path))))
        self._drawing = True
        try:
            current = self.metric.value
            self.metric.options = [(metric_label(name), name) for name in names] or [current]
            self.metric.value = current if current in names or not names else names[0]
        finally:
            self._drawing = False
        metric, x_axis, smoothing = self.metric.value, self.x_axis.value, float(self.smoothing.value)
        with self.figure.batch_update():
            self.figure.data = []
            order = [r.name for r in self.runs]
            for run in chosen:
                xs, ys = metric_series(self._read(run.path), metric, x=x_axis)
                color = _COLORS[order.index(run.name) % len(_COLORS)]
                if smoothing > 0:
                    self.figure.add_scatter(
                        x=xs, y=ys, name=f"{run.name} raw", meta="raw", mode="lines", opacity=0.25,
                        line={"color": color, "width": 1}, showlegend=False, hoverinfo="skip",
                    )  # fmt: skip
                self.figure.add_scatter(
                    x=xs,
                    y=list(ema(ys, smoothing)),
                    name=run.name,
                    mode="lines+markers" if metric.startswith(("val ", "test ")) else "lines",
                    line={"color": color, "width": 2},
                    hovertemplate=html.escape(run.name)
                    + f"<br>{x_axis} %{{x:.4g}}<br>%{{y:.4g}}<extra></extra>",
                )
            label = metric_label(metric)
            self.figure.layout.title.text = f"{label} of {len(chosen)} run{'s' * (len(chosen) != 1)}"
            self.figure.layout.xaxis.title.text = (
                "optimizer step" if x_axis == "step" else "seconds since start"
            )
            self.figure.layout.yaxis.title.text = label
        self._show_diff(chosen)

    def _show_diff(self, chosen: list[RunSummary]) -> None:
        if len(chosen) < 2:
            self.diff_view.value = "<i>select two runs or more to see what differs in their settings</i>"
            return
        differ = config_diff(chosen)
        if not differ:
            self.diff_view.value = "<b>settings</b>: the same"
            return
        rows = [[name, *(json.dumps(value) for value in values)] for name, values in differ.items()]
        table = html_table(["setting", *(r.name for r in chosen)], rows, cell_style=CELL)
        self.diff_view.value = "<b>what differs</b>" + table


# Room between the columns (an ipywidgets HTML cell has no padding of its own), one line per cell; a table
# wider than the notebook's column scrolls inside its widget instead of pushing the browser wider.
CELL = "padding:2px 14px 2px 0;white-space:nowrap;font-variant-numeric:tabular-nums"
_SCROLLS = {"max_width": "100%", "overflow": "auto"}
