"""How the loss plot draws each curve: a colour per split for one run, per run for several (train solid,
val dashed with markers, test markers), ranks in colours of their own (or dashes, for several runs), each
evaluation metric in its own panel; what the legend calls each curve and its order.

The legend names only what differs: one run's entries are "train", "val", "test" and "each rank" (every
rank's curve behind one entry: 8 ranks are one line of legend, and a click hides or shows them all); with
several runs each run's entries sit under its name, and a click hides or shows the run. A metric panel's
curves need no entry: the panel's title names the metric, and they hide with their split (one run) or run.
"""

from __future__ import annotations

from typing import Any

import plotly.colors

from workbench.widgets.panels import metric_axis

SPLITS = ("train", "val", "test")
RUN_COLORS = plotly.colors.qualitative.Plotly  # several runs: a colour per run, a dash per split
SPLIT_COLORS = {"train": "#1f77b4", "val": "#ff7f0e", "test": "#2ca02c"}  # one run: a colour per split
RANK_COLORS = ("#17becf", "#e377c2", "#bcbd22", "#7f7f7f", "#8c564b", "#d62728")  # not the splits'
RANK_DASHES = ("dot", "dashdot", "longdash", "longdashdot")  # several runs: one per rank, repeating
RAW_OPACITY = 0.25  # the unsmoothed curve behind a smoothed one


def smoothed(curve: str) -> bool:
    """Curves drawn through the EMA: the per-step ones (train, each rank's)."""
    return curve == "train" or curve.startswith("rank ")


def curve_style(run_color: str, curve: str, *, several: bool, metric_names: dict[str, int]) -> dict[str, Any]:
    """Colour, dash, width, mode, marker and axis of one curve (see the module docstring)."""
    split, _, rest = curve.partition(" ")
    if split == "rank":
        rank = int(rest)
        if several:
            color, dash = run_color, RANK_DASHES[rank % len(RANK_DASHES)]
        else:
            color, dash = RANK_COLORS[rank % len(RANK_COLORS)], "solid"
        return style(color, "lines", dash=dash, width=1.3)
    if rest:  # "val accuracy": an evaluation metric, in its own panel
        index = metric_names.get(rest, 0)
        axes = metric_axis(index)
        color = run_color if several else SPLIT_COLORS[split]
        if split == "test":
            return style(color, "markers", symbol="x", size=9, axes=axes)
        return style(color, "lines+markers", dash="dash" if several else "solid", width=2, size=6, axes=axes)
    color = run_color if several else SPLIT_COLORS[split]
    if split == "train":
        return style(color, "lines", width=2)
    if split == "val":
        return style(color, "lines+markers", dash="dash" if several else "solid", width=2.5, size=7)
    return style(color, "markers", symbol="x", size=10)


def style(
    color: str,
    mode: str,
    *,
    dash: str = "solid",
    width: float = 2,
    symbol: str = "circle",
    size: float = 6,
    axes: tuple[str, str] = ("x", "y"),
) -> dict[str, Any]:
    return {
        "color": color,
        "mode": mode,
        "dash": dash,
        "width": width,
        "symbol": symbol,
        "size": size,
        "xaxis": axes[0],
        "yaxis": axes[1],
    }


def legend_entry(run: str, curve: str, *, several: bool) -> dict[str, Any]:
    """The legend's name, group, and whether `curve` of `run` has an entry (see the module docstring)."""
    split, _, rest = curve.partition(" ")
    kind = "ranks" if split == "rank" else split
    return {
        "name": "each rank" if kind == "ranks" else split,
        "legendgroup": run if several else kind,
        "legendgrouptitle": {"text": run if several else ""},
        "showlegend": rest in ("", "0") if kind == "ranks" else not rest,
    }


def restyle(trace: Any, style: dict[str, Any], legend: dict[str, Any]) -> None:
    trace.update(legend)
    trace.mode = style["mode"]
    trace.line = {"color": style["color"], "dash": style["dash"], "width": style["width"]}
    trace.marker = {"color": style["color"], "symbol": style["symbol"], "size": style["size"]}


def curve_order(curve: str) -> tuple[int, int, str]:
    """train, val, test, then rank 0, rank 1, ..., then the metrics."""
    if curve in SPLITS:
        return (SPLITS.index(curve), 0, "")
    first, rest = curve.split(" ", 1)
    if first == "rank":
        return (len(SPLITS), int(rest), "")
    return (len(SPLITS) + 1, SPLITS.index(first), rest)
