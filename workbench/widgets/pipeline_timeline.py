"""A pipeline step as a Gantt chart: what each stage ran when, and how much of the step it sat idle.

Every stage of a pipeline-parallel run reports its forward/backward spans on each logged step (the
``timeline`` key of ``on_step`` events, see `workbench.train.events`). Once every stage of a step has
reported, that step becomes the one drawn: a row per stage, a bar per span (forwards solid, backwards
hatched, micro-batches coloured by index and labelled ``F3`` / ``B3``), and the title compares the
measured bubble with ``(p − 1) / (m + p − 1)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import plotly.colors

from workbench._validate import check_int
from workbench.parallel.strategies.timeline import KINDS, StepTimeline
from workbench.train.events import Callback, Event
from workbench.widgets._figure_widget import FigureWidget
from workbench.widgets.live_figure import MIN_HEIGHT, TEMPLATE, LiveFigure

_COLORS = plotly.colors.qualitative.Plotly  # one per micro-batch, repeating
_KIND_STYLE: dict[str, dict[str, Any]] = {
    "F": {"name": "forward", "pattern": {"shape": ""}, "opacity": 1.0},
    "B": {
        "name": "backward",
        "pattern": {"shape": "/", "fillmode": "overlay", "solidity": 0.4},
        "opacity": 0.7,
    },
}


class PipelineTimeline(LiveFigure, Callback):
    """The latest complete pipeline step as a Gantt chart: stages down, seconds from the step start across.

    Subscribe it to a trainer (``callbacks=[view]``) and show it by ending a cell with ``view``. ``on_step``
    events with a ``timeline`` (one per stage and step) are kept by step until every stage of that step
    has arrived; the newest complete step is drawn, by a timer thread at most `max_updates_per_s` times
    a second, and ``on_fit_end`` (or `flush`) draws the final state. `show_step` draws stored payloads.

    Args:
        max_pending: steps kept while waiting for their last stage (older ones are dropped, ≥ 1).
        max_updates_per_s: the most redraws per second while training (> 0).
        height: figure height in pixels.

    Example (GPipe, 2 stages, 2 micro-batches, every pass 1 s):
        >>> view = PipelineTimeline()
        >>> for stage, spans in enumerate([
        ...     [["F", 0, 0, 1], ["F", 1, 1, 2], ["B", 0, 4, 5], ["B", 1, 5, 6]],
        ...     [["F", 0, 1, 2], ["F", 1, 2, 3], ["B", 0, 3, 4], ["B", 1, 4, 5]],
        ... ]):
        ...     view.on_step({"step": 1, "rank": stage, "timeline": {
        ...         "stage": stage, "stages": 2, "microbatches": 2, "schedule": "GPipe", "spans": spans}})
        >>> view.on_fit_end({"status": "finished"})
        >>> view
        PipelineTimeline(step 1, GPipe, 2 stages × 2 micro-batches, bubble 33% measured, 33% ideal)
        >>> [round(x, 4) for x in view.bubble()]
        [0.3333, 0.3333]
    """

    def __init__(self, *, max_pending: int = 8, max_updates_per_s: float = 4, height: int = 300) -> None:
        check_int("height", height, minimum=MIN_HEIGHT)
        self.max_pending = check_int("max_pending", max_pending, minimum=1)
        figure = FigureWidget(
            layout={
                "height": height,
                "margin": {"l": 70, "r": 20, "t": 40, "b": 40},
                "title": {"text": "pipeline timeline: waiting for every stage of a step", "x": 0.01},
                "barmode": "overlay",
                "xaxis": {"title": {"text": "seconds from the step start"}, "rangemode": "tozero"},
                "yaxis": {"type": "category", "autorange": "reversed"},
                "uirevision": "timeline",
                "template": TEMPLATE,
            }
        )
        super().__init__(figure, max_updates_per_s=max_updates_per_s)
        # under _data_lock:
        self._pending: dict[int, dict[int, Mapping[str, Any]]] = {}  # step → stage → payload
        self._latest: tuple[int | None, StepTimeline] | None = None  # (step, its timeline)
        self._done = 0  # the newest complete step of this fit: payloads of steps up to it are ignored
        self._changed = False
        # under _figure_lock:
        self._traces: dict[str, Any] = {}  # kind → its bar trace

    def __repr__(self) -> str:
        latest = self.latest()
        if latest is None:
            return "PipelineTimeline(no complete step yet)"
        step, timeline = latest
        return f"PipelineTimeline({'stored step' if step is None else f'step {step}'}, {_summary(timeline)})"

    def latest(self) -> tuple[int | None, StepTimeline] | None:
        """(step, `StepTimeline`) of the newest complete step (step None after `show_step`), or None."""
        with self._data_lock:
            return self._latest

    def bubble(self) -> tuple[float, float] | None:
        """(measured, ideal) bubble fraction of the newest complete step, or None before the first."""
        latest = self.latest()
        return None if latest is None else (latest[1].bubble, latest[1].ideal_bubble)

    def show_step(self, payloads: Iterable[Mapping[str, Any]], step: int | None = None) -> StepTimeline:
        """Draw one step from its ``timeline`` payloads (one per stage) now; returns its `StepTimeline`.

        Raises ValueError for payloads `StepTimeline.from_payloads` refuses (a stage missing, say).
        """
        timeline = StepTimeline.from_payloads(payloads)
        with self._data_lock:
            self._latest = (step, timeline)
            self._changed = True
        self.flush()
        return timeline

    # ------------------------------------------------------------------ events (training thread)

    def on_fit_start(self, info: Event) -> None:
        with self._data_lock:
            self._done = info.get("start_step", 0)  # steps numbered from here on are this fit's
        self._throttle.start()

    def on_step(self, metrics: Event) -> None:
        payload = metrics.get("timeline")
        if payload is None:
            return
        if not isinstance(payload, Mapping) or "stage" not in payload:
            raise ValueError(f"a timeline must be a dict with a 'stage' key, got {payload!r}")
        count = check_int("timeline stages", payload.get("stages"), minimum=1)
        step = metrics["step"]
        with self._data_lock:
            if step <= self._done:
                return  # a straggler from a step older than the newest complete one
            stages = self._pending.setdefault(step, {})
            stages[payload["stage"]] = payload
            if len(stages) < count:
                while len(self._pending) > self.max_pending:
                    del self._pending[min(self._pending)]
                return
            del self._pending[step]
        timeline = StepTimeline.from_payloads(stages.values())  # outside the lock: raises on bad payloads
        with self._data_lock:
            if step <= self._done:
                return
            self._latest, self._done, self._changed = (step, timeline), step, True
            for older in [s for s in self._pending if s < step]:
                del self._pending[older]
        self._throttle.poke()

    def on_fit_end(self, summary: Event) -> None:
        self._stop_and_flush()

    # ------------------------------------------------------------------ internals

    def _draw(self) -> None:
        """Send the newest complete step to the figure: one bar trace per kind, one bar per span."""
        with self._figure_lock:
            with self._data_lock:
                if not self._changed or self._latest is None:
                    return
                self._changed = False
                timeline = self._latest[1]
            rows = [f"stage {stage}" for stage in range(timeline.stages)]
            with self.figure.batch_update():
                for kind in KINDS:
                    spans = [span for span in timeline.spans if span.kind == kind]
                    trace = self._traces.get(kind) or self._add_trace(kind)
                    trace.y = [rows[span.stage] for span in spans]
                    trace.base = [span.start for span in spans]
                    trace.x = [span.end - span.start for span in spans]
                    trace.text = [f"{kind}{span.microbatch}" for span in spans]
                    trace.customdata = [[span.start, span.end] for span in spans]
                    trace.marker.color = [_COLORS[span.microbatch % len(_COLORS)] for span in spans]
                self.figure.layout.yaxis.categoryarray = rows
                self.figure.layout.title.text = _title(timeline)

    def _add_trace(self, kind: str) -> Any:
        style = _KIND_STYLE[kind]
        self.figure.add_bar(
            name=style["name"],
            orientation="h",
            opacity=style["opacity"],
            marker={"pattern": style["pattern"], "line": {"width": 1, "color": "white"}},
            textposition="inside",
            insidetextanchor="middle",
            hovertemplate=("%{text} on %{y}<br>%{customdata[0]:.4f} – %{customdata[1]:.4f} s<extra></extra>"),
        )
        self._traces[kind] = self.figure.data[-1]
        return self._traces[kind]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'es' if word.endswith('h') else 's'}" if count != 1 else f"{count} {word}"


def _shape(timeline: StepTimeline) -> str:
    """e.g. "2 stages × 4 micro-batches"."""
    return f"{_plural(timeline.stages, 'stage')} × {_plural(timeline.microbatches, 'micro-batch')}"


def _summary(timeline: StepTimeline) -> str:
    """e.g. "1F1B, 2 stages × 4 micro-batches, bubble 31% measured, 20% ideal"."""
    bubble = f"bubble {timeline.bubble:.0%} measured, {timeline.ideal_bubble:.0%} ideal"
    return f"{timeline.schedule}, {_shape(timeline)}, {bubble}"


def _title(timeline: StepTimeline) -> str:
    """e.g. "1F1B · 2 stages × 4 micro-batches · bubble 31% measured, 20% = (p−1)/(m+p−1)"."""
    bubble = f"bubble {timeline.bubble:.0%} measured, {timeline.ideal_bubble:.0%} = (p−1)/(m+p−1)"
    return f"{timeline.schedule} · {_shape(timeline)} · {bubble}"
