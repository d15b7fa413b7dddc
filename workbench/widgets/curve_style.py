"""How the loss plot draws each curve: a colour per split for one run, per run for several (train solid,
val dashed with markers, test markers), ranks in colours of their own (or dashes, for several runs), and
evaluation metrics dotted on a second axis; the order of the legend."""

from __future__ import annotations

from typing import Any

import plotly.colors

SPLITS = ("train", "val", "test")
RUN_COLORS = plotly.colors.qualitative.Plotly  # several runs: a colour per run, a dash per split
SPLIT_COLORS = {"train": "#1f77b4", "val": "#ff7f0e", "test": "#2ca02c"}  # one run: a colour per split
METRIC_COLORS = ("#9467bd", "#d62728", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
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
    if rest:  # "val accuracy": an evaluation metric on the right axis
        color = run_color if several else METRIC_COLORS[metric_names.get(rest, 0) % len(METRIC_COLORS)]
        if split == "test":
            return style(color, "markers", symbol="x", size=8, yaxis="y2")
        return style(color, "lines+markers", dash="dot", width=1.5, symbol="diamond", size=6, yaxis="y2")
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
    yaxis: str = "y",
) -> dict[str, Any]:
    return {
        "color": color,
        "mode": mode,
        "dash": dash,
        "width": width,
        "symbol": symbol,
        "size": size,
        "yaxis": yaxis,
    }


def restyle(trace: Any, style: dict[str, Any]) -> None:
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
