"""Where the time goes: each rank's step split into its phases, fed by ``step_time`` events.

Left, a stacked bar per rank: the median of each phase over the rank's last `window` logged steps, in ms
(data, copy, forward, backward, comm, optimizer, other; see `workbench.train.step_time`). Right, the same
parts of the lowest rank's steps over time, stacked, so a loader that falls behind or communication that
grows shows as it happens. DDP's all-reduce that overlapped backward is in the hover text, not the bars.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping
from typing import Any

from workbench._validate import check_int, check_nonnegative
from workbench.train.events import Event
from workbench.train.step_time import PHASES
from workbench.widgets._figure_widget import FigureWidget
from workbench.widgets.live_figure import MIN_HEIGHT, TEMPLATE
from workbench.widgets.rank_bars import RankBars

_COLORS = {
    "data": "#FFA15A",
    "copy": "#FECB52",
    "forward": "#636EFA",
    "backward": "#AB63FA",
    "comm": "#EF553B",
    "optimizer": "#00CC96",
    "other": "#B6B6B6",
}
_HISTORY = 500  # logged steps kept for the over-time plot


class StepTimePlot(RankBars):
    """Each rank's logged steps split into phases: stacked bars per rank and the parts over steps, in ms.

    Subscribe it to a trainer or launch (``callbacks=[plot]``; a `Dashboard` adds one by itself) and show
    it by ending a cell with ``plot``.

    Args:
        window: a rank's bar is the median of its last `window` logged steps (≥ 1).
        max_updates_per_s: the most redraws per second while training (> 0).
        height: figure height in pixels.

    Example:
        >>> plot = StepTimePlot()
        >>> for step in (10, 20):
        ...     for rank in range(2):
        ...         parts = {"data": 0.001, "copy": 0.0, "forward": 0.004, "backward": 0.008, "comm": 0.002,
        ...                  "optimizer": 0.003, "other": 0.001, "comm_overlapped": 0.001}
        ...         plot.on_step({"step": step, "rank": rank, "step_time": {**parts, "total": 0.019}})
        >>> plot.on_fit_end({"status": "finished"})
        >>> plot
        StepTimePlot(2 ranks; rank 0: 19.0 ms a step, backward 42%, forward 21%, optimizer 16%)
        >>> plot.bars(), round(plot.parts()[1]["comm"], 6)
        (['rank 0', 'rank 1'], 0.002)
    """

    def __init__(self, *, window: int = 5, max_updates_per_s: float = 1, height: int = 320) -> None:
        check_int("height", height, minimum=MIN_HEIGHT)
        self.window = check_int("window", window, minimum=1)
        figure = FigureWidget(
            layout={
                "height": height,
                "margin": {"l": 60, "r": 20, "t": 40, "b": 40},
                "title": {"text": "where the time goes (ms per logged step)", "x": 0.01},
                "barmode": "stack",
                "xaxis": {"type": "category", "domain": [0, 0.3]},
                "yaxis": {"title": {"text": "ms"}, "rangemode": "tozero"},
                "xaxis2": {"title": {"text": "step"}, "domain": [0.4, 1], "anchor": "y2"},
                "yaxis2": {"rangemode": "tozero", "anchor": "x2"},
                "uirevision": "step_time",
                "template": TEMPLATE,
            }
        )
        super().__init__(figure, max_updates_per_s=max_updates_per_s)
        # under _data_lock:
        self._recent: dict[int, deque[dict[str, float]]] = {}  # rank → its last `window` step_time dicts
        self._history: deque[tuple[int, dict[str, float]]] = deque(maxlen=_HISTORY)  # (step, parts)
        self._history_rank: int | None = None  # whose steps the over-time plot shows: the lowest rank
        self._changed = False
        # under _figure_lock (and `_bars`: phase → its bar trace):
        self._areas: dict[str, Any] = {}

    def __repr__(self) -> str:
        parts = self.parts()
        if not parts:
            return "StepTimePlot(no data yet)"
        rank, first = next(iter(parts.items()))
        total = sum(first[phase] for phase in PHASES)
        largest = sorted(PHASES, key=lambda phase: -first[phase])[:3]
        shares = ", ".join(f"{phase} {first[phase] / total:.0%}" for phase in largest) if total else ""
        ranks = f"{len(parts)} rank{'s' * (len(parts) != 1)}"
        return f"StepTimePlot({ranks}; rank {rank}: {total * 1e3:.1f} ms a step, {shares})"

    def parts(self) -> dict[int, dict[str, float]]:
        """Rank → seconds per phase (and ``comm_overlapped``): the medians its bar shows."""
        with self._data_lock:
            recent = {rank: list(times) for rank, times in sorted(self._recent.items())}
        keys = (*PHASES, "comm_overlapped")
        return {
            rank: {k: statistics.median(t.get(k, 0.0) for t in times) for k in keys}
            for rank, times in recent.items()
        }

    # ------------------------------------------------------------------ events (training thread)

    def on_step(self, metrics: Event) -> None:
        if metrics.get("step_time") is None:
            return
        parts = _checked(metrics["step_time"])
        rank = metrics.get("rank", 0)
        with self._data_lock:
            self._recent.setdefault(rank, deque(maxlen=self.window)).append(parts)
            if self._history_rank is None or rank < self._history_rank:
                self._history_rank = rank
                self._history.clear()
            if rank == self._history_rank:
                self._history.append((metrics.get("step", len(self._history)), parts))
            self._changed = True
        self._throttle.poke()

    # ------------------------------------------------------------------ internals

    def _draw(self) -> None:
        """Send the bars and the over-time areas to the figure (redrawn whole: at most 500 points)."""
        with self._figure_lock:
            with self._data_lock:
                if not self._changed:
                    return
                self._changed = False
                history = list(self._history)
                history_rank = self._history_rank
            medians = self.parts()
            if not medians:
                return
            with self._data_lock:
                labels = self._rank_labels(medians)
            overlapped = [parts["comm_overlapped"] * 1e3 for parts in medians.values()]
            steps = [step for step, _ in history]
            if not self._bars:
                for phase in PHASES:
                    self._add(phase)
            # bars and areas in messages of their own: plotly's front end lost the bars' category x when
            # one update carried them beside the areas' numeric x
            with self.figure.batch_update():
                self.figure.layout.yaxis2.title.text = f"rank {history_rank}, ms"
                for phase in PHASES:
                    bar = self._bars[phase]
                    bar.x, bar.y = labels, [parts[phase] * 1e3 for parts in medians.values()]
                    bar.customdata = overlapped
            with self.figure.batch_update():
                for phase in PHASES:
                    area = self._areas[phase]
                    area.x, area.y = steps, [parts[phase] * 1e3 for _, parts in history]

    def _add(self, phase: str) -> None:
        color = _COLORS[phase]
        extra = "<br>all-reduce overlapping backward: %{customdata:.3g} ms" if phase == "comm" else ""
        self.figure.add_bar(
            name=phase,
            legendgroup=phase,
            marker={"color": color},
            hovertemplate=f"%{{x}}<br>{phase}: %{{y:.3g}} ms{extra}<extra></extra>",
        )
        self._bars[phase] = self.figure.data[-1]
        self.figure.add_scatter(
            name=phase,
            legendgroup=phase,
            showlegend=False,
            mode="lines",
            stackgroup="over time",
            line={"width": 0.5, "color": color},
            xaxis="x2",
            yaxis="y2",
            hovertemplate=f"step %{{x}}<br>{phase}: %{{y:.3g}} ms<extra></extra>",
        )
        self._areas[phase] = self.figure.data[-1]


def _checked(step_time: Mapping[str, Any]) -> dict[str, float]:
    """The phases (and ``comm_overlapped``) of a ``step_time`` dict as seconds ≥ 0; ValueError otherwise."""
    if not isinstance(step_time, Mapping):
        raise ValueError(f"step_time must be a dict of seconds per phase, got {step_time!r}")
    missing = [phase for phase in PHASES if phase not in step_time]
    if missing:
        raise ValueError(f"step_time lacks {', '.join(missing)}; it needs {', '.join(PHASES)}")
    parts = {}
    for key in (*PHASES, "comm_overlapped"):
        parts[key] = float(check_nonnegative(f"step_time[{key!r}]", step_time.get(key, 0.0)))
    return parts
