"""Every widget shows a stable plain-text line (what nbval compares, what consoles print)."""

import torch

from workbench.devices.microbench import benchmark_hardware
from workbench.widgets import DeviceMonitor, Estimator, HardwareInspector, LossPlot


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
