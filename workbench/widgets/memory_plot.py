"""What each rank holds in a training step: a stacked bar per rank, fed by ``memory`` events.

The trainer reports, once a fit, each rank's bytes of parameters, gradients, optimizer state and saved
activations (see `workbench.train.events`). Bars stack those four in MiB, with
the exact bytes on hover and ``torch.cuda.max_memory_allocated`` as a marker when measured on a GPU.
Reference bars (`MemoryPlot.add_reference`) put, say, a single process beside the ranks of an FSDP run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from workbench._validate import check_int, check_nonnegative
from workbench.train.events import Event
from workbench.widgets._figure_widget import FigureWidget
from workbench.widgets.live_figure import MIN_HEIGHT, TEMPLATE
from workbench.widgets.rank_bars import RankBars

PARTS = ("params", "grads", "optimizer_state", "activations")
_NAMES = {"params": "parameters", "grads": "gradients", "optimizer_state": "optimizer state"}
_COLORS = {"params": "#636EFA", "grads": "#EF553B", "optimizer_state": "#00CC96", "activations": "#AB63FA"}
_MIB = 2**20
_RANK_LABEL = re.compile(r"rank \d+|one process")
_TITLE = "memory per rank in a training step"


class MemoryPlot(RankBars):
    """Bytes of parameters, gradients, optimizer state and activations per rank, as stacked bars in MiB.

    Subscribe it to a trainer (``callbacks=[plot]``) and show it by ending a cell with ``plot``. Every
    ``on_step`` event with a ``memory`` dict (any rank) sets that rank's bar; a timer thread redraws at
    most `max_updates_per_s` times a second and ``on_fit_end`` (or `flush`) draws the final state.

    Args:
        max_updates_per_s: the most redraws per second while training (> 0).
        height: figure height in pixels.

    Example:
        >>> plot = MemoryPlot()
        >>> plot.add_reference("1 process", {"params": 4 * 2**20, "grads": 4 * 2**20,
        ...                                  "optimizer_state": 8 * 2**20, "activations": 2**20})
        >>> for rank in range(2):
        ...     plot.on_step({"step": 1, "rank": rank, "memory": {
        ...         "params": 2 * 2**20, "grads": 2 * 2**20, "optimizer_state": 4 * 2**20,
        ...         "activations": 2**19, "cuda_peak": None, "device": "cpu"}})
        >>> plot.on_fit_end({"status": "finished"})
        >>> plot
        MemoryPlot(2 ranks, rank 0 8.5 MiB, rank 1 8.5 MiB, reference 1 process 17.0 MiB)
        >>> plot.bars()
        ['1 process', 'rank 0', 'rank 1']
    """

    def __init__(self, *, max_updates_per_s: float = 4, height: int = 320) -> None:
        check_int("height", height, minimum=MIN_HEIGHT)
        figure = FigureWidget(
            layout={
                "height": height,
                "margin": {"l": 60, "r": 20, "t": 40, "b": 40},
                "title": {"text": _TITLE, "x": 0.01},
                "barmode": "stack",
                "yaxis": {"title": {"text": "MiB"}, "rangemode": "tozero"},
                "xaxis": {"type": "category"},
                "uirevision": "memory",
                "template": TEMPLATE,
            }
        )
        super().__init__(figure, max_updates_per_s=max_updates_per_s)
        # under _data_lock:
        self._memory: dict[int, dict[str, Any]] = {}  # rank → its latest memory dict
        self._references: dict[str, dict[str, Any]] = {}  # label → memory dict, drawn before the ranks
        self._changed = False
        # under _figure_lock (and `_bars`: part → its bar trace):
        self._peaks: Any = None  # the cuda_peak marker trace, added when a peak is first known

    def __repr__(self) -> str:
        with self._data_lock:
            ranks = sorted(self._memory.items())
            references = list(self._references.items())
        if not ranks and not references:
            return "MemoryPlot(no data yet)"
        parts = [f"{len(ranks)} rank{'s' * (len(ranks) != 1)}"]
        parts += [f"rank {rank} {_size(_total(memory))}" for rank, memory in ranks]
        parts += [f"reference {label} {_size(_total(memory))}" for label, memory in references]
        return f"MemoryPlot({', '.join(parts)})"

    def memory(self) -> dict[int, dict[str, Any]]:
        """Rank → the latest ``memory`` dict it reported (copies)."""
        with self._data_lock:
            return {rank: dict(memory) for rank, memory in sorted(self._memory.items())}

    def add_reference(self, label: str, memory: Mapping[str, Any]) -> None:
        """Draw `memory` (a ``memory`` dict, e.g. a single-process run's rank 0) as a bar called `label`.

        Reference bars come before the ranks', in the order added; a label used again replaces its bar.
        Raises ValueError for an empty label, one like ``"rank 0"`` (the ranks' own), or a bad dict.
        """
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"label must be a non-empty string, got {label!r}")
        if _RANK_LABEL.fullmatch(label):
            raise ValueError(f"label {label!r} is taken by a rank's bar; choose another, e.g. '1 process'")
        checked = _checked(memory)
        with self._data_lock:
            self._references[label] = checked
            self._changed = True
        self.flush()

    # ------------------------------------------------------------------ events (training thread)

    def on_step(self, metrics: Event) -> None:
        if metrics.get("memory") is None:
            return
        checked = _checked(metrics["memory"])
        with self._data_lock:
            self._memory[metrics.get("rank", 0)] = checked
            self._changed = True
        self._throttle.poke()

    # ------------------------------------------------------------------ internals

    def _draw(self) -> None:
        """Send every bar to the figure (a handful of values: redrawn whole)."""
        with self._figure_lock:
            with self._data_lock:
                if not self._changed:
                    return
                self._changed = False
                rows = list(self._references.items())
                ranks = sorted(self._memory.items())
                rows += zip(self._rank_labels(rank for rank, _ in ranks), (m for _, m in ranks), strict=True)
                title = "memory in a training step" if self._single_process else _TITLE
            if not rows:
                return
            labels = [label for label, _ in rows]
            peaks = [(label, m["cuda_peak"]) for label, m in rows if m.get("cuda_peak") is not None]
            with self.figure.batch_update():
                self.figure.layout.title.text = title
                for part in PARTS:
                    trace = self._bars.get(part) or self._add_bar(part)
                    values = [memory[part] for _, memory in rows]
                    trace.x, trace.y, trace.customdata = labels, [v / _MIB for v in values], values
                if peaks and self._peaks is None:
                    self._peaks = self._add_peaks()
                if self._peaks is not None:
                    self._peaks.x = [label for label, _ in peaks]
                    self._peaks.y = [peak / _MIB for _, peak in peaks]
                    self._peaks.customdata = [peak for _, peak in peaks]

    def _add_bar(self, part: str) -> Any:
        name = _NAMES.get(part, part)
        self.figure.add_bar(
            name=name,
            marker={"color": _COLORS[part]},
            hovertemplate=f"%{{x}}<br>{name}: %{{customdata:,}} bytes (%{{y:.3g}} MiB)<extra></extra>",
        )
        self._bars[part] = self.figure.data[-1]
        return self._bars[part]

    def _add_peaks(self) -> Any:
        self.figure.add_scatter(
            name="CUDA peak allocated",
            mode="markers",
            marker={"symbol": "line-ew-open", "size": 36, "line": {"width": 3, "color": "#222"}},
            hovertemplate="%{x}<br>CUDA peak: %{customdata:,} bytes (%{y:.3g} MiB)<extra></extra>",
        )
        return self.figure.data[-1]


def _checked(memory: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a ``memory`` dict whose four parts (and ``cuda_peak`` unless None) are byte counts ≥ 0."""
    if not isinstance(memory, Mapping):
        raise ValueError(f"memory must be a dict of byte counts, got {memory!r}")
    missing = [part for part in PARTS if part not in memory]
    if missing:
        raise ValueError(f"memory lacks {', '.join(missing)}; it needs {', '.join(PARTS)}")
    for key in (*PARTS, "cuda_peak"):
        if memory.get(key) is not None:
            check_nonnegative(f"memory[{key!r}]", memory[key])
    return dict(memory)


def _total(memory: Mapping[str, Any]) -> float:
    return sum(memory[part] for part in PARTS)


def _size(nbytes: float) -> str:
    """e.g. "12.3 MiB", or "14.2 KiB" below 0.1 MiB (a small model would read "0.0 MiB")."""
    return f"{nbytes / _MIB:.1f} MiB" if nbytes >= 0.1 * _MIB else f"{nbytes / 1024:.1f} KiB"
