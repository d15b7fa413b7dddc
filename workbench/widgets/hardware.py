"""`HardwareInspector`: what this machine has, what it measures, and what the datasheet promises.

inspector = HardwareInspector()   # device report now; microbenchmarks when you press Measure
inspector.measure()               # or in code (seconds on a CPU, quick sizes)
inspector                         # shows itself as the last expression of a cell
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from workbench.devices import DeviceReport, GpuInfo, device_report
from workbench.devices.datasheets import GpuDatasheet, find_datasheet
from workbench.devices.microbench import HardwareBenchmark, benchmark_hardware
from workbench.tables import html_table
from workbench.widgets._display import sync_figure_for_display, widget_bundle
from workbench.widgets._figure_widget import FigureWidget

COMPARISON_HEADERS = ("device", "figure", "measured", "datasheet", "measured / datasheet")
# measured row name → (datasheet field, factor from datasheet units to the measured unit)
_GPU_FIGURES = {
    "device→device copy": ("memory_bandwidth_gbs", 1.0),
    "GPU matmul fp32": ("fp32_tflops", 1.0),
    "GPU matmul tf32": ("tf32_tflops", 1.0),
    "GPU matmul bf16": ("bf16_tflops", 1.0),
}


class HardwareInspector:
    """Devices (the Foundation device report), measured bandwidth and FLOP/s beside datasheet figures
    where the GPU is known, and the interconnect (PCIe generation × width, NVLink links).

    Args:
        report: a `DeviceReport` (default: `device_report()` now).
        benchmark: results of `benchmark_hardware` to show instead of measuring.
        repeats: repeats per microbenchmark when `measure` runs.

    Example:
        >>> from workbench.devices.microbench import benchmark_hardware
        >>> inspector = HardwareInspector(benchmark=benchmark_hardware(repeats=1, device="cpu"))
        >>> [row[1] for row in inspector.comparison_rows()][:2]
        ['CPU memory copy', 'CPU matmul fp32']
    """

    def __init__(
        self,
        report: DeviceReport | None = None,
        benchmark: HardwareBenchmark | None = None,
        *,
        repeats: int = 3,
    ) -> None:
        self.report = report if report is not None else device_report()
        self.benchmark = benchmark
        self.repeats = repeats
        self.measure_button = widgets.Button(
            description="Measure", icon="tachometer", tooltip="run microbenchmarks"
        )
        self.measure_button.on_click(lambda _: self.measure())
        self.devices = widgets.HTML(self.report._repr_html_())
        self.interconnect = widgets.HTML(self._interconnect_html())
        self.comparison = widgets.HTML()
        self.figure = FigureWidget(
            layout={
                "height": 320,
                "barmode": "group",
                "yaxis": {"type": "log", "title": {"text": "GB/s or GFLOP/s"}},
                "margin": {"l": 60, "r": 20, "t": 40, "b": 90},
                "title": {"text": "measured vs datasheet"},
                "template": "plotly_white",
            }
        )
        self.widget = widgets.VBox(
            [self.devices, self.interconnect, self.measure_button, self.comparison, self.figure]
        )
        self._draw()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        sync_figure_for_display(self.figure)
        return widget_bundle(self.widget, repr(self), **kwargs)

    def __repr__(self) -> str:
        measured = "not measured" if self.benchmark is None else "measured"
        cores, gpus = self.report.cpu.logical_cores, len(self.report.gpus)
        return f"HardwareInspector({cores} CPU cores, {gpus} GPUs, {measured})"

    def measure(self) -> HardwareBenchmark:
        """Run the quick microbenchmarks now and show them."""
        self.measure_button.disabled = True
        self.measure_button.description = "Measuring…"
        try:
            self.benchmark = benchmark_hardware(repeats=self.repeats)
        finally:
            self.measure_button.disabled = False
            self.measure_button.description = "Measure"
        self._draw()
        return self.benchmark

    def datasheets(self) -> dict[int, GpuDatasheet | None]:
        """GPU index → its datasheet, or None when the model is not in the table."""
        return {gpu.index: find_datasheet(gpu.name) for gpu in self.report.gpus}

    def comparison_rows(self) -> list[tuple[str, str, str, str, str]]:
        """(device, figure, measured, datasheet, ratio) rows; empty before anything was measured."""
        if self.benchmark is None:
            return []
        rows = []
        for m in self.benchmark.measurements:
            device = "GPU" if m.name.startswith(("GPU", "device", "host")) else "CPU"
            sheet_value = self._datasheet_value(m.name)
            ratio = f"{m.value / sheet_value:.0%}" if sheet_value else ""
            sheet = f"{sheet_value:g} {m.unit}" if sheet_value else ""
            rows.append((device, m.name, f"{m.value:.4g} {m.unit}", sheet, ratio))
        rows += [("", name, f"not measured: {reason}", "", "") for name, reason in self.benchmark.skipped]
        return rows

    def _datasheet_value(self, name: str) -> float | None:
        if name not in _GPU_FIGURES or not self.report.gpus:
            return None
        sheet = find_datasheet(self.report.gpus[0].name)
        if sheet is None:
            return None
        field, factor = _GPU_FIGURES[name]
        value = getattr(sheet, field)
        return None if value is None else value * factor

    def _interconnect_html(self) -> str:
        if not self.report.gpus:
            reason = self.report.nvml.error or "no NVIDIA GPU"
            return f"<p><b>Interconnect</b>: no GPUs to connect ({reason}).</p>"
        rows = [_interconnect_row(gpu, find_datasheet(gpu.name)) for gpu in self.report.gpus]
        headers = ("GPU", "model", "PCIe now", "PCIe max", "NVLink links", "datasheet interconnect")
        return html_table(headers, rows, caption="interconnect")

    def _draw(self) -> None:
        rows = self.comparison_rows()
        if not rows:
            self.comparison.value = (
                "<p>Press <b>Measure</b> (or call <code>measure()</code>) for bandwidth and FLOP/s.</p>"
            )
        else:
            self.comparison.value = html_table(COMPARISON_HEADERS, rows, caption="measured on this machine")
        measured = [m for m in (self.benchmark.measurements if self.benchmark else ())]
        names = [m.name for m in measured]
        values = [m.value * (1000 if m.unit == "TFLOP/s" else 1) for m in measured]  # one axis: GB/s, GFLOP/s
        sheets = [
            (self._datasheet_value(m.name) or 0) * (1000 if m.unit == "TFLOP/s" else 1) or None
            for m in measured
        ]
        with self.figure.batch_update():
            self.figure.data = ()
            if measured:
                self.figure.add_bar(x=names, y=values, name="measured", marker_color="#1f77b4")
                if any(sheets):
                    self.figure.add_bar(x=names, y=sheets, name="datasheet", marker_color="#ff7f0e")


def _interconnect_row(gpu: GpuInfo, sheet: GpuDatasheet | None) -> tuple[str, ...]:
    def link(generation: int | None, width: int | None) -> str:
        return "unknown" if generation is None or width is None else f"gen {generation} ×{width}"

    return (
        str(gpu.index),
        gpu.name,
        link(gpu.pcie_generation, gpu.pcie_width),
        link(gpu.pcie_max_generation, gpu.pcie_max_width),
        "unknown" if gpu.nvlinks_active is None else str(gpu.nvlinks_active),
        "not in the datasheet table" if sheet is None else f"{sheet.interconnect}; {sheet.pcie}",
    )
