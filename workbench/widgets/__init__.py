"""Live views of training: ipywidgets + plotly in a notebook, a tqdm bar in a terminal.

`Dashboard` puts a progress bar, `LossPlot`, `MetricPlot`, `DeviceMonitor` and controls together, with
`MemoryPlot`, `StepTimePlot` (where the time goes) and `PipelineTimeline` once the trainer reports memory,
step times or pipeline spans; `ConsoleProgress`
(from `workbench.train.progress`, no plotly needed) is the text fallback. `RunsBrowser` compares finished
runs; `lr_range_figure` draws a learning-rate range test. `HardwareInspector` and `Estimator` help choose
hardware and a strategy. Names are imported on first
use.
"""

from __future__ import annotations

from workbench._lazy import lazy_attributes

_HOMES = {
    "ConsoleProgress": "workbench.train.progress",
    "Dashboard": "workbench.widgets.dashboard",
    "DeviceMonitor": "workbench.widgets.device_monitor",
    "DownsampledSeries": "workbench.widgets.series",
    "Estimator": "workbench.widgets.estimator",
    "HardwareInspector": "workbench.widgets.hardware",
    "LossPlot": "workbench.widgets.loss_plot",
    "MetricPlot": "workbench.widgets.metric_plot",
    "MemoryPlot": "workbench.widgets.memory_plot",
    "PipelineTimeline": "workbench.widgets.pipeline_timeline",
    "RunsBrowser": "workbench.widgets.runs_browser",
    "lr_range_figure": "workbench.widgets.lr_range_plot",
    "StepTimePlot": "workbench.widgets.step_time_plot",
}

__all__ = sorted(_HOMES)

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
