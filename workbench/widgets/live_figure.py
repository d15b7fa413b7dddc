"""What every live plot shares: a plotly figure that other threads feed and a timer thread redraws.

Threads and locks: the training (or sampler) thread changes a view's data under `_data_lock`, held for
microseconds, then calls ``_throttle.poke()``. The view's `_draw` runs on the throttle's timer thread, at
most `max_updates_per_s` times a second, or on the caller of `flush`; it holds `_figure_lock` and takes
`_data_lock` inside it only to copy what changed, never the other way round.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
import plotly.io as pio

from workbench._validate import check_positive
from workbench.widgets._display import sync_figure_for_display, widget_bundle
from workbench.widgets.throttle import Throttle

MIN_HEIGHT = 50  # pixels: a figure any smaller shows nothing (every view checks its `height`)
# The live plots' look: plotly_white, tick labels drawn where they fall. plotly's default for numeric axes
# ("hide past div") measures every label against the page on every draw, once per label it places (a tenth of
# the page's time drawing a 2-process Launch's Dashboard on 2 busy cores)
TEMPLATE = go.layout.Template(pio.templates["plotly_white"])
TEMPLATE.layout.xaxis.ticklabeloverflow = "allow"
TEMPLATE.layout.yaxis.ticklabeloverflow = "allow"


class LiveFigure:
    """A plotly `figure` shown in an ipywidgets VBox below `controls`, redrawn by the subclass's `_draw`.

    Args:
        figure: the FigureWidget to draw into.
        max_updates_per_s: the most timer redraws per second (> 0).
        controls: widgets shown above the figure (a toggle, a summary line).
    """

    def __init__(
        self, figure: go.FigureWidget, *, max_updates_per_s: float, controls: Sequence[widgets.Widget] = ()
    ) -> None:
        self._throttle = Throttle(self._draw, check_positive("max_updates_per_s", max_updates_per_s))
        self._data_lock = threading.Lock()
        self._figure_lock = threading.RLock()
        self.figure = figure
        self.widget = widgets.VBox([*controls, figure])
        self.awaiting_cell: dict[str, Any] | None = None  # set by a Dashboard while a cell awaits it

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        self.sync_for_display()
        return widget_bundle(self.widget, repr(self), **kwargs)

    def sync_for_display(self) -> None:
        """Let a browser view opened now start from the figure as it is (see `sync_figure_for_display`)."""
        with self._figure_lock:
            sync_figure_for_display(self.figure)

    def flush(self) -> None:
        """Draw what is pending now, on this thread."""
        self._draw()

    def point_counts(self) -> dict[str, int]:
        """Trace name → number of points in the figure now (what the browser shows)."""
        with self._figure_lock:
            return {trace.name: 0 if trace.x is None else len(trace.x) for trace in self.figure.data}

    def _stop_and_flush(self) -> None:
        """Stop the timer thread and draw what it had not drawn yet (the end of a run)."""
        self._throttle.stop()
        self.flush()

    def _draw(self) -> None:
        """Send the data changed since the last draw to the figure (under `_figure_lock`)."""
        raise NotImplementedError
