"""Live CPU/GPU utilisation and memory lines over a rolling time window, fed by device-sampler samples.

A sample is the plain dict a `workbench.monitor` sampler passes to its subscribers::

    {"time": 1700000000.0,
     "cpu": {"percent": 35.0, "per_core": [...], "ram_used": 2**33, "ram_total": 2**36},
     "gpus": [{"index": 0, "name": "NVIDIA H100", "utilization": 87.0, "memory_used": 2**35,
               "memory_total": 2**36, "power_w": 300.0, "temperature_c": 65.0,
               "pcie_tx_bytes_per_s": 1e9, "pcie_rx_bytes_per_s": 3e9}]}

With no GPUs (no NVML) ``"gpus"`` is empty and only CPU and RAM are drawn.
"""

from __future__ import annotations

import html
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import ipywidgets as widgets
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench._validate import check_positive
from workbench.monitor import DeviceSampler
from workbench.widgets.live_figure import LiveFigure

Sample = dict[str, Any]
_COLORS = plotly.colors.qualitative.Plotly
_CORE_COLOR = "rgba(120, 120, 120, 0.35)"
_GIB = 2**30


class Subscribable(Protocol):
    """What `DeviceMonitor.attach` needs: ``subscribe(callback)`` returning an unsubscribe function."""

    def subscribe(self, callback: Callable[[Sample], None]) -> Callable[[], None]: ...


@dataclass
class _Line:
    name: str
    panel: int  # 1: utilisation, 2: memory
    group: str  # legend group: one per device, so a click hides both of its lines
    color: str
    width: float
    x: deque[float] = field(default_factory=deque)
    y: deque[float] = field(default_factory=deque)


class DeviceMonitor(LiveFigure):
    """Utilisation % and memory-used % per device against seconds since the first sample.

    Left panel: average CPU utilisation and each GPU's (and each CPU core as a thin grey line with
    `per_core`). Right panel: RAM and each GPU's memory. Only the last `window_s` seconds are kept and
    drawn; a line of text above the plots shows the latest sample, with GPU power, temperature and PCIe
    traffic when the sampler reports them. Samples only append to small deques; a timer thread redraws
    at most `max_updates_per_s` times per second.

    Args:
        window_s: seconds of history shown and kept (> 0).
        max_updates_per_s: the most redraws per second (> 0).
        per_core: also draw one line per CPU core.
        height: figure height in pixels.

    Example:
        >>> monitor = DeviceMonitor(window_s=30)
        >>> for t in range(3):
        ...     monitor.update({"time": 100.0 + t, "gpus": [],
        ...                     "cpu": {"percent": 50.0, "per_core": [], "ram_used": 1, "ram_total": 4}})
        >>> monitor.flush()
        >>> monitor.point_counts()
        {'CPU': 3, 'RAM': 3}
    """

    def __init__(
        self,
        window_s: float = 60,
        max_updates_per_s: float = 2,
        *,
        per_core: bool = False,
        height: int = 300,
    ) -> None:
        self.window_s = check_positive("window_s", window_s)
        self.per_core = per_core
        figure = make_subplots(
            rows=1, cols=2, subplot_titles=("utilization %", "memory used %"), horizontal_spacing=0.08
        )
        figure.update_layout(
            height=height,
            margin={"l": 50, "r": 20, "t": 40, "b": 40},
            template="plotly_white",
            uirevision="devices",
        )
        figure.update_xaxes(title_text="seconds", range=[0, self.window_s])
        figure.update_yaxes(range=[0, 102])
        self.summary = widgets.HTML(value="waiting for the first sample…")  # drawn under _figure_lock
        super().__init__(
            go.FigureWidget(figure), max_updates_per_s=max_updates_per_s, controls=[self.summary]
        )
        self._unsubscribe: Callable[[], None] | None = None
        self._own_sampler: DeviceSampler | None = None  # made by `start`
        # under _data_lock:
        self._lines: dict[str, _Line] = {}
        self._t0: float | None = None
        self._latest: Sample | None = None
        # under _figure_lock:
        self._traces: dict[str, Any] = {}

    def __repr__(self) -> str:
        shown = "a sample shown" if self._latest is not None else "no samples yet"
        return f"DeviceMonitor(window {self.window_s:g} s, {shown})"

    def update(self, sample: Sample) -> None:
        """Add one sample (a sampler subscriber: ``sampler.subscribe(monitor.update)``)."""
        values = list(self._values(sample))
        with self._data_lock:
            if self._t0 is None:
                self._t0 = float(sample["time"])
            x = float(sample["time"]) - self._t0
            for name, panel, group, value in values:
                line = self._lines.get(name) or self._new_line(name, panel, group)
                line.x.append(x)
                line.y.append(value)
            for line in self._lines.values():
                while line.x and line.x[0] < x - self.window_s:
                    line.x.popleft()
                    line.y.popleft()
            self._latest = sample
        self._throttle.poke()

    def start(self, interval: float = 0.5) -> DeviceMonitor:
        """Sample this machine's CPU and GPUs every `interval` seconds with a sampler of its own and draw
        them live: for a loop you wrote yourself (a `Dashboard` brings its own). Returns the monitor, so
        ``DeviceMonitor().start()`` can end a cell; `stop` (or leaving a ``with`` block) ends it.

        Example:
            >>> import time
            >>> with DeviceMonitor().start(interval=0.05) as monitor:
            ...     time.sleep(0.3)
            >>> monitor.point_counts()["CPU"] >= 2, monitor.running
            (True, False)
        """
        self.stop()
        sampler = DeviceSampler(interval=interval)
        self.attach(sampler)
        sampler.start()
        self._own_sampler = sampler
        return self

    def stop(self) -> None:
        """Stop the sampler `start` made (if any), unsubscribe and draw what is pending."""
        sampler, self._own_sampler = self._own_sampler, None
        if sampler is not None:
            sampler.stop()
        self.detach()

    @property
    def running(self) -> bool:
        """True while the monitor's own sampler (from `start`) runs."""
        return self._own_sampler is not None and self._own_sampler.running

    def __enter__(self) -> DeviceMonitor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def attach(self, sampler: Subscribable) -> None:
        """Subscribe `update` to `sampler` (its ``subscribe`` returns the function that unsubscribes)."""
        self.detach()
        self._unsubscribe = sampler.subscribe(self.update)

    def detach(self) -> None:
        """Unsubscribe from the attached sampler (if any), stop the timer and draw what is pending."""
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        self._stop_and_flush()

    def _values(self, sample: Sample) -> Iterator[tuple[str, int, str, float]]:
        """(line name, panel, legend group, percent) for each value the sample reports."""
        cpu = sample.get("cpu") or {}
        if cpu.get("percent") is not None:
            yield "CPU", 1, "CPU", float(cpu["percent"])
        if self.per_core:
            for i, percent in enumerate(cpu.get("per_core") or []):
                yield f"core {i}", 1, "cores", float(percent)
        if cpu.get("ram_total"):
            yield "RAM", 2, "CPU", 100.0 * cpu["ram_used"] / cpu["ram_total"]
        for gpu in sample.get("gpus") or []:
            name = f"GPU {gpu['index']}"
            if gpu.get("utilization") is not None:
                yield name, 1, name, float(gpu["utilization"])
            if gpu.get("memory_total"):
                yield f"{name} memory", 2, name, 100.0 * gpu["memory_used"] / gpu["memory_total"]

    def _new_line(self, name: str, panel: int, group: str) -> _Line:
        if group == "cores":
            color, width = _CORE_COLOR, 1.0
        else:
            groups = list(dict.fromkeys(line.group for line in self._lines.values() if line.group != "cores"))
            index = groups.index(group) if group in groups else len(groups)
            color, width = _COLORS[index % len(_COLORS)], 2.0
        line = _Line(name, panel, group, color, width)
        self._lines[name] = line
        return line

    def _draw(self) -> None:
        with self._figure_lock:
            with self._data_lock:
                lines = [(line, list(line.x), list(line.y)) for line in self._lines.values()]
                latest, t0 = self._latest, self._t0
            if latest is None or t0 is None:
                return
            now = float(latest["time"]) - t0
            x_range = [max(0.0, now - self.window_s), max(now, self.window_s)]
            with self.figure.batch_update():
                for line, x, y in lines:
                    trace = self._traces.get(line.name) or self._add_trace(line)
                    trace.x, trace.y = x, y
                self.figure.update_xaxes(range=x_range)
            self.summary.value = _summary(latest)

    def _add_trace(self, line: _Line) -> Any:
        self.figure.add_scatter(
            name=line.name,
            legendgroup=line.group,
            showlegend=line.group != "cores",
            mode="lines+markers",  # markers: a short run's few samples still show
            line={"color": line.color, "width": line.width},
            marker={"color": line.color, "size": 3 if line.group == "cores" else 5},
            hovertemplate=f"{line.name}<br>%{{x:.1f}} s<br>%{{y:.1f}} %<extra></extra>",
            row=1,
            col=line.panel,
        )
        trace = self.figure.data[-1]
        self._traces[line.name] = trace
        return trace


def _summary(sample: Sample) -> str:
    """The latest sample as one line of HTML."""
    parts = []
    cpu = sample.get("cpu") or {}
    if cpu.get("percent") is not None:
        parts.append(f"<b>CPU</b> {cpu['percent']:.0f}%")
    if cpu.get("ram_total"):
        parts.append(f"RAM {cpu['ram_used'] / _GIB:.1f} / {cpu['ram_total'] / _GIB:.1f} GiB")
    for gpu in sample.get("gpus") or []:
        facts = []
        if gpu.get("utilization") is not None:
            facts.append(f"{gpu['utilization']:.0f}%")
        if gpu.get("memory_total"):
            facts.append(f"{gpu['memory_used'] / _GIB:.1f} / {gpu['memory_total'] / _GIB:.1f} GiB")
        if gpu.get("power_w") is not None:
            facts.append(f"{gpu['power_w']:.0f} W")
        if gpu.get("temperature_c") is not None:
            facts.append(f"{gpu['temperature_c']:.0f} °C")
        tx, rx = gpu.get("pcie_tx_bytes_per_s"), gpu.get("pcie_rx_bytes_per_s")
        if tx is not None and rx is not None:
            facts.append(f"PCIe tx {tx / 1e9:.2f} rx {rx / 1e9:.2f} GB/s")
        label = f"GPU {gpu['index']}" + (f" {gpu['name']}" if gpu.get("name") else "")
        parts.append(f"<b>{html.escape(label)}</b> " + ", ".join(facts))
    return " · ".join(parts)
