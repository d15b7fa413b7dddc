"""`lr_range_figure`: a learning-rate range test (`workbench.train.find_lr`) as a plot: the loss against the
lr on a log axis, the smoothed curve over the faint raw one, the suggested lr and the lowest point marked."""

from __future__ import annotations

import math
from typing import Any

from workbench.train.lr_range import LrRange
from workbench.widgets.curve_style import RAW_OPACITY, SPLIT_COLORS

GREEN, RED = "#2ca02c", "#d62728"  # the suggestion; the lowest point, past which the loss blows up


def lr_range_figure(result: LrRange, *, height: int = 360) -> Any:
    """A plotly figure of `result`; show it as a cell's last expression (or ``figure.show()``).

    Example:
        >>> result = LrRange.of([10.0**e for e in range(-6, 2)], [2.0, 1.9, 1.6, 1.0, 0.5, 0.4, 0.6, 3.0], "diverged")
        >>> figure = lr_range_figure(result)
        >>> [trace.name for trace in figure.data], figure.layout.xaxis.type
        (['loss', 'smoothed', 'suggested lr 0.001', 'lowest loss at lr 1'], 'log')
    """  # noqa: E501
    import plotly.graph_objects as go

    if not isinstance(result, LrRange):
        raise TypeError(f"result must be what find_lr returns (an LrRange), got {type(result).__name__}")
    color = SPLIT_COLORS["train"]
    figure = go.Figure(
        layout={
            "title": f"lr range test ({result.ended})",
            "xaxis": {"type": "log", "title": "learning rate", "exponentformat": "power"},
            "yaxis": {"title": "training loss"},
            "height": height,
            "margin": {"t": 50, "b": 40, "l": 60, "r": 20},
        }
    )
    figure.add_scatter(x=result.lrs, y=result.losses, name="loss", opacity=RAW_OPACITY, line_color=color)
    figure.add_scatter(x=result.lrs, y=result.smoothed, name="smoothed", line_color=color)
    marks = {"suggested lr": (result.suggestion, GREEN), "lowest loss at lr": (result.lowest_lr, RED)}
    for what, (lr, mark_color) in marks.items():
        if lr is None:
            continue
        nearest = min(range(len(result.lrs)), key=lambda i: abs(math.log(result.lrs[i] / lr)))
        loss = result.smoothed[nearest]  # a suggestion capped at a tenth of the lowest is between steps
        marker = {"size": 11, "color": mark_color}
        figure.add_scatter(x=[lr], y=[loss], name=f"{what} {lr:.3g}", mode="markers", marker=marker)
    if result.losses and max(result.losses) > 1.5 * result.smoothed[0]:  # a diverged tail would squash
        top, low = 1.5 * result.smoothed[0], min(result.losses)  # the rest: show up to half again the start
        figure.update_yaxes(range=[low - 0.05 * (top - low), top])
    return figure
