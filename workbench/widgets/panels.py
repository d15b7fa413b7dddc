"""Where the loss plot's panels go: the loss on top, then one small panel per evaluation metric, in rows of
`COLUMNS` that wrap, all sharing the step axis (zoom one, the others follow); and where its legend goes.

Sizes are in pixels and turned into plotly's paper fractions here, so a metric row is the same height
however many rows there are: each row adds `ROW_HEIGHT` to the figure.

    >>> layout = panel_layout(["accuracy", "f1", "top-5", "precision"], loss_height=420)
    >>> layout["height"], layout["annotations"][3]["text"], layout["xaxis5"]["matches"]
    (820, 'precision', 'x')
    >>> [round(layout[f"xaxis{n}"]["domain"][0], 2) for n in (2, 3, 4, 5)]  # three to a row, then wraps
    [0.0, 0.36, 0.72, 0.0]
"""

from __future__ import annotations

import math
from typing import Any

COLUMNS = 3  # metric panels per row: ~300 px each in a 1000-px notebook column
ROW_HEIGHT = 200  # pixels per row of metric panels
MARGIN = {"l": 60, "r": 20, "t": 60, "b": 40}
_LOSS_AXIS_TITLE = 45  # pixels under the loss panel for its tick labels and "optimizer step"
_PANEL_TITLE = 28  # pixels above a metric panel for its name
_PANEL_TICKS = 22  # pixels under a metric panel for its step tick labels
_COLUMN_GAP = 0.08  # of the width: room for a panel's y tick labels


def metric_axis(index: int) -> tuple[str, str]:
    """The x and y axes of metric panel `index` (0, 1, ...) as traces name them: ("x2", "y2"), ..."""
    return f"x{index + 2}", f"y{index + 2}"


def panel_layout(metrics: list[str], *, loss_height: int) -> dict[str, Any]:
    """The figure's height and every panel's axes for the loss panel and one panel per name in `metrics`.

    The loss panel keeps `loss_height` pixels of figure (margins included); each row of metric panels adds
    `ROW_HEIGHT`. A metric panel's title is an annotation above its top left corner (a y axis title would
    stand on its side, in the panel to its left).
    """
    rows = math.ceil(len(metrics) / COLUMNS)
    height = loss_height + rows * ROW_HEIGHT
    paper = height - MARGIN["t"] - MARGIN["b"]  # the pixels plotly's [0, 1] fractions span

    def fraction(pixels_from_bottom: float) -> float:
        return max(0.0, min(1.0, pixels_from_bottom / paper))

    loss_bottom = rows * ROW_HEIGHT + (_LOSS_AXIS_TITLE if rows else 0)
    layout: dict[str, Any] = {
        "height": height,
        "xaxis": {"domain": [0, 1], "anchor": "y", "title": {"text": "optimizer step"}},
        "yaxis": {"domain": [fraction(loss_bottom), 1], "anchor": "x"},
        "annotations": [],  # the metric panels' titles
    }
    width = (1 - _COLUMN_GAP * (COLUMNS - 1)) / COLUMNS
    for index, name in enumerate(metrics):
        row, column = divmod(index, COLUMNS)
        top = (rows - row) * ROW_HEIGHT - _PANEL_TITLE
        bottom = (rows - row - 1) * ROW_HEIGHT + _PANEL_TICKS
        left = column * (width + _COLUMN_GAP)
        x, y = metric_axis(index)
        layout[f"xaxis{x[1:]}"] = {"domain": [left, left + width], "anchor": y, "matches": "x"}
        domain = [fraction(bottom), fraction(top)]
        layout[f"yaxis{y[1:]}"] = {"domain": domain, "anchor": x}
        layout["annotations"].append(
            {
                "text": name,
                "xref": f"{x} domain",
                "yref": f"{y} domain",
                "x": 0,
                "y": 1,
                "xanchor": "left",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 13},
            }
        )
    return layout


def legend_layout(*, several_runs: bool) -> dict[str, Any]:
    """One run: one row above the loss panel's right end (train, val, test, each rank). Several: a column
    right of the panels, an entry per curve under each run's name."""
    if several_runs:
        return {"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"}
    return {"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "bottom", "yref": "paper"}
