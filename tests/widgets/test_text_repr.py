"""Every widget shows a stable plain-text line (what nbval compares, what consoles print)."""

import torch

from workbench.devices.microbench import benchmark_hardware
from workbench.widgets import (
    DeviceMonitor,
    Estimator,
    HardwareInspector,
    LossPlot,
    MemoryPlot,
    PipelineTimeline,
)


def _text(widget) -> str:
    text = widget._repr_mimebundle_()["text/plain"]
    assert text == repr(widget)
    return text


def test_loss_plot_and_device_monitor():
    plot = LossPlot()
    assert _text(plot) == "LossPlot(no data yet)"
    plot.on_step({"step": 1, "loss": 1.0})
    plot.flush()
    assert _text(plot) == "LossPlot(run 1 train: 1)"
    assert _text(DeviceMonitor(window_s=30)) == "DeviceMonitor(window 30 s, no samples yet)"


def test_hardware_inspector_and_estimator():
    inspector = HardwareInspector(benchmark=benchmark_hardware(repeats=1, device="cpu"))
    assert _text(inspector).startswith("HardwareInspector(") and _text(inspector).endswith("GPUs, measured)")
    model = torch.nn.Linear(64, 10)
    text = _text(Estimator(model, sample=torch.zeros(1, 64), samples_per_epoch=1000))
    assert text.startswith("Estimator(single on 1 × ") and text.endswith(": fits)")


def test_memory_plot_and_pipeline_timeline():
    plot = MemoryPlot()
    assert _text(plot) == "MemoryPlot(no data yet)"
    memory = {"params": 2**20, "grads": 2**20, "optimizer_state": 2**21, "activations": 0, "cuda_peak": None}
    plot.on_step({"step": 1, "rank": 0, "memory": memory})
    assert _text(plot) == "MemoryPlot(1 rank, rank 0 4.0 MiB)"
    plot.add_reference("1 process", {**memory, "params": 2**21})
    assert _text(plot) == "MemoryPlot(1 rank, rank 0 4.0 MiB, reference 1 process 5.0 MiB)"
    small = {"params": 10_000, "grads": 10_000, "optimizer_state": 0, "activations": 480, "cuda_peak": None}
    plot.on_step({"step": 1, "rank": 1, "memory": small})  # a tiny model: KiB, not "0.0 MiB"
    assert _text(plot) == "MemoryPlot(2 ranks, rank 0 4.0 MiB, rank 1 20.0 KiB, reference 1 process 5.0 MiB)"
    view = PipelineTimeline()
    assert _text(view) == "PipelineTimeline(no complete step yet)"
    spans = [["F", 0, 0.0, 1.0], ["F", 1, 1.0, 2.0], ["B", 1, 2.0, 3.0], ["B", 0, 3.0, 4.0]]
    view.show_step([{"stage": 0, "stages": 1, "microbatches": 2, "schedule": "GPipe", "spans": spans}])
    assert _text(view) == (
        "PipelineTimeline(stored step, GPipe, 1 stage × 2 micro-batches, bubble 0% measured, 0% ideal)"
    )
