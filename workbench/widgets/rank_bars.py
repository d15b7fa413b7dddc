"""What the per-rank bar views share (`MemoryPlot`, `StepTimePlot`): a stacked bar per rank, called
"one process" when the fit has a single one, and the bars the figure holds now."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go

from workbench.train.events import Callback, Event
from workbench.widgets.live_figure import LiveFigure


class RankBars(LiveFigure, Callback):
    """A `LiveFigure` and `Callback` whose subclass keeps its stacked bar traces in `_bars` (part → trace, in
    stacking order, under `_figure_lock`) and labels its bars with `_rank_labels`."""

    def __init__(self, figure: go.FigureWidget, *, max_updates_per_s: float) -> None:
        super().__init__(figure, max_updates_per_s=max_updates_per_s)
        self._single_process = False  # under _data_lock: the fit said world_size 1 (one bar, not "rank 0")
        self._bars: dict[str, Any] = {}  # under _figure_lock

    def bars(self) -> list[str]:
        """The bars in the figure now, left to right (what the browser shows)."""
        with self._figure_lock:
            trace = next(iter(self._bars.values()), None)
            return [] if trace is None or trace.x is None else list(trace.x)

    def on_fit_start(self, info: Event) -> None:
        with self._data_lock:
            self._single_process = info.get("world_size") == 1
        self._throttle.start()

    def on_fit_end(self, summary: Event) -> None:
        self._stop_and_flush()

    def _rank_labels(self, ranks: Iterable[int]) -> list[str]:
        """``["one process"]`` for the one rank of a single-process fit, else ``"rank N"`` each (call it
        under `_data_lock`)."""
        ranks = list(ranks)
        if self._single_process and len(ranks) == 1:
            return ["one process"]
        return [f"rank {rank}" for rank in ranks]
