"""Live CPU/GPU utilisation and memory lines over a rolling time window, fed by device-sampler samples.

A sample is the plain dict a `workbench.monitor` sampler passes to its subscribers::

    {"time": 1700000000.0,
     "cpu": {"percent": 35.0, "per_core": [...], "ram_used": 2**33, "ram_total": 2**36},
     "gpus": [{"index": 0, "name": "NVIDIA H100", "utilization": 87.0, "memory_used": 2**35,
               "memory_total": 2**36, "power_w": 300.0, "temperature_c": 65.0,
               "pcie_tx_bytes_per_s": 1e9, "pcie_rx_bytes_per_s": 3e9}]}

With no GPUs (no NVML) ``"gpus"`` is empty and only CPU and RAM are drawn. A sampler that watches a
launch's workers adds ``"processes"``: each rank's CPU (cores busy) and resident memory, drawn as a line
per rank beside the machine's. Given ``loss=True`` the monitor is also a training `Callback` and draws the
loss in a row above, against the same seconds: one time axis for what the run did and what the devices did.
"""

from __future__ import annotations

import html
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import ipywidgets as widgets
import plotly.colors
import psutil
from plotly.subplots import make_subplots

from workbench._validate import check_int, check_positive
from workbench.monitor import DeviceSampler
from workbench.train.events import Callback, Event
from workbench.widgets._figure_widget import FigureWidget
from workbench.widgets.live_figure import MIN_HEIGHT, TEMPLATE, LiveFigure

Sample = dict[str, Any]
_COLORS = plotly.colors.qualitative.Plotly
_CORE_COLOR = "rgba(120, 120, 120, 0.35)"
_LOSS_COLOR = "#333333"  # the devices keep the palette: CPU is blue whether or not the loss row is there
_GIB = 2**30
_LOSS_POINTS_PER_S = 20  # the loss row keeps at most this many points a second (a step may take 1 ms)
MARKED_POINTS = 20  # a sampled line shows a marker per sample up to this many samples


class Subscribable(Protocol):
    """What `DeviceMonitor.attach` needs: ``subscribe(callback)`` returning an unsubscribe function."""

    def subscribe(self, callback: Callable[[Sample], None]) -> Callable[[], None]: ...


@dataclass
class _Line:
    name: str
    panel: str  # "loss", "utilization" or "memory"
    group: str  # legend group: one per device, so a click hides both of its lines
    color: str
    width: float
    x: deque[float] = field(default_factory=deque)
    y: deque[float] = field(default_factory=deque)


class DeviceMonitor(LiveFigure, Callback):
    """Utilisation % and memory-used % per device against seconds since the start, rows sharing that axis.

    Utilisation row: average CPU utilisation, each GPU's, each watched rank's share of the CPU (and each
    core as a thin grey line with `per_core`). Memory row: RAM, each GPU's memory, each rank's resident
    memory (and GPU memory, where NVML lists it). With `loss`, a loss row on top from the training events.
    The x axis covers the run so far, up to the last `window_s` seconds (older points are dropped); a line
    of text above the plots shows the latest sample, with GPU power, temperature and PCIe traffic when the
    sampler reports them. Samples only append to small deques; a timer thread redraws at most
    `max_updates_per_s` times per second.

    Args:
        window_s: seconds of history shown and kept (> 0).
        max_updates_per_s: the most redraws per second (> 0).
        per_core: also draw one line per CPU core.
        loss: add the loss row (subscribe the monitor to a trainer; a `Dashboard` does).
        height: figure height in pixels (default: 190 per row).

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
        loss: bool = False,
        height: int | None = None,
    ) -> None:
        self.window_s = check_positive("window_s", window_s)
        if height is not None:
            check_int("height", height, minimum=MIN_HEIGHT)
        self.per_core = per_core
        self._rows = {"loss": 1, "utilization": 2, "memory": 3} if loss else {"utilization": 1, "memory": 2}
        titles = {"loss": "loss", "utilization": "utilization %", "memory": "memory used %"}
        figure = make_subplots(
            rows=len(self._rows),
            cols=1,
            shared_xaxes=True,
            vertical_spacing=0.09,
            subplot_titles=[titles[row] for row in self._rows],
        )
        figure.update_layout(
            height=height or 190 * len(self._rows) + 40,
            margin={"l": 55, "r": 20, "t": 30, "b": 40},
            template=TEMPLATE,
            uirevision="devices",
            legend={"orientation": "v", "x": 1.01, "y": 1},
        )
        figure.update_xaxes(range=[0, 1])
        figure.update_xaxes(title_text="seconds since the start", row=len(self._rows), col=1)
        for panel in ("utilization", "memory"):
            figure.update_yaxes(range=[0, 102], row=self._rows[panel], col=1)
        self.summary = widgets.HTML(value="waiting for the first sample…")  # drawn under _figure_lock
        super().__init__(FigureWidget(figure), max_updates_per_s=max_updates_per_s, controls=[self.summary])
        self._unsubscribe: Callable[[], None] | None = None
        self._own_sampler: DeviceSampler | None = None  # made by `start`
        # under _data_lock:
        self._lines: dict[str, _Line] = {}
        self._t0: float | None = None
        self._now = 0.0  # seconds since _t0 of the latest sample or step
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
            self._append(float(sample["time"]), values)
            self._latest = sample
        self._throttle.poke()

    # ------------------------------------------------------------------ training events (loss=True)

    def on_fit_start(self, info: Event) -> None:
        with self._data_lock:
            if self._t0 is None:
                self._t0 = float(info.get("time", time.time()))

    def on_step(self, metrics: Event) -> None:
        if "loss" not in self._rows or metrics.get("rank", 0) != 0 or "time" not in metrics:
            return
        with self._data_lock:
            loss = self._lines.get("loss")
            at = float(metrics["time"])
            if loss is not None and loss.x and at - self._t0 - loss.x[-1] < 1.0 / _LOSS_POINTS_PER_S:
                return  # thin out: the row spans seconds, not steps
            self._append(at, [("loss", "loss", "loss", float(metrics["loss"]))])
        self._throttle.poke()

    def _append(self, at: float, values: list[tuple[str, str, str, float]]) -> None:
        """Add values taken at unix time `at`, drop what left the window (data lock held)."""
        if self._t0 is None:
            self._t0 = at
        x = at - self._t0
        for name, panel, group, value in values:
            line = self._lines.get(name) or self._new_line(name, panel, group)
            line.x.append(x)
            line.y.append(value)
        self._now = max(self._now, x)
        for line in self._lines.values():
            while line.x and line.x[0] < self._now - self.window_s:
                line.x.popleft()
                line.y.popleft()

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

    def _values(self, sample: Sample) -> Iterator[tuple[str, str, str, float]]:
        """(line name, panel, legend group, percent) for each value the sample reports."""
        cpu = sample.get("cpu") or {}
        if cpu.get("percent") is not None:
            yield "CPU", "utilization", "CPU", float(cpu["percent"])
        if self.per_core:
            for i, percent in enumerate(cpu.get("per_core") or []):
                yield f"core {i}", "utilization", "cores", float(percent)
        if cpu.get("ram_total"):
            yield "RAM", "memory", "CPU", 100.0 * cpu["ram_used"] / cpu["ram_total"]
        gpu_totals = {}
        for gpu in sample.get("gpus") or []:
            name = f"GPU {gpu['index']}"
            if gpu.get("utilization") is not None:
                yield name, "utilization", name, float(gpu["utilization"])
            if gpu.get("memory_total"):
                gpu_totals[gpu["index"]] = gpu["memory_total"]
                yield f"{name} memory", "memory", name, 100.0 * gpu["memory_used"] / gpu["memory_total"]
        cores = len(cpu.get("per_core") or []) or psutil.cpu_count() or 1
        for process in sample.get("processes") or []:
            rank = f"rank {process['rank']}"
            if process.get("cpu_cores") is not None:  # the share of the machine: the ranks add up to CPU
                yield f"{rank} CPU", "utilization", rank, 100.0 * process["cpu_cores"] / cores
            if cpu.get("ram_total") and process.get("rss") is not None:
                yield f"{rank} RAM", "memory", rank, 100.0 * process["rss"] / cpu["ram_total"]
            total = gpu_totals.get(process.get("gpu_index"))
            if total and process.get("gpu_memory") is not None:
                gpu = f"GPU {process['gpu_index']}"
                yield f"{rank} {gpu} memory", "memory", rank, 100.0 * process["gpu_memory"] / total

    def _new_line(self, name: str, panel: str, group: str) -> _Line:
        if group == "cores":
            color, width = _CORE_COLOR, 1.0
        elif group == "loss":
            color, width = _LOSS_COLOR, 2.0
        else:
            own_colour = ("cores", "loss")
            groups = list(
                dict.fromkeys(line.group for line in self._lines.values() if line.group not in own_colour)
            )
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
                now = self._now
            if t0 is None:
                return
            x_range = [max(0.0, now - self.window_s), max(now, 1.0)]  # the run so far, or the last window
            with self.figure.batch_update():
                for line, x, y in lines:
                    trace = self._traces.get(line.name) or self._add_trace(line)
                    trace.x, trace.y = x, y
                    mode = _mode(line, len(x))
                    if trace.mode != mode:
                        trace.mode = mode
                self.figure.update_xaxes(range=x_range)
            if latest is not None:
                self.summary.value = _summary(latest)

    def _add_trace(self, line: _Line) -> Any:
        unit = "%{y:.4g}" if line.panel == "loss" else "%{y:.1f} %"
        rank = line.group.startswith("rank ")
        self.figure.add_scatter(
            name=line.name,
            legendgroup=line.group,
            showlegend=line.group != "cores",
            mode=_mode(line, 0),
            line={"color": line.color, "width": line.width, "dash": "dot" if rank else "solid"},
            marker={"color": line.color, "size": 3 if line.group == "cores" else 5},
            hovertemplate=f"{line.name}<br>%{{x:.1f}} s<br>{unit}<extra></extra>",
            row=self._rows[line.panel],
            col=1,
        )
        trace = self.figure.data[-1]
        self._traces[line.name] = trace
        return trace


def _mode(line: _Line, points: int) -> str:
    """Markers while a sampled line is short (one sample draws no line); then a line only: a marker per
    sample, redrawn every frame, was much of a busy page's time."""
    return "lines+markers" if line.panel != "loss" and points <= MARKED_POINTS else "lines"


def _summary(sample: Sample) -> str:
    """The latest sample as one line of HTML."""
    parts = _device_summary(sample)
    for process in sample.get("processes") or []:
        cores = process.get("cpu_cores")
        busy = "" if cores is None else f"{cores:.2f} cores, "
        parts.append(f"rank {process['rank']} {busy}{process['rss'] / _GIB:.2f} GiB")
    return " · ".join(parts)


def _device_summary(sample: Sample) -> list[str]:
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
    return parts
