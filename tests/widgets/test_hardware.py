"""HardwareInspector and Estimator through their widget objects (no browser)."""

import html

import pytest
import torch

from workbench import models
from workbench.devices import DeviceReport, GpuInfo, NvmlReport, device_report
from workbench.devices.microbench import HardwareBenchmark, Measurement, benchmark_hardware
from workbench.estimate.hardware import hardware_from_benchmark
from workbench.widgets.estimator import STRATEGIES, Estimator
from workbench.widgets.hardware import HardwareInspector


@pytest.fixture(scope="module")
def cpu_benchmark():
    return benchmark_hardware(repeats=1, device="cpu")


def _report_with(gpus):
    report = device_report()
    nvml = NvmlReport(gpus=tuple(gpus), driver_version="550.54", cuda_driver_version="12.4", error=None)
    return DeviceReport(report.python, report.platform, report.packages, report.cpu, nvml, report.cuda)


H100 = GpuInfo(0, "NVIDIA H100 80GB HBM3", None, 80 << 30, (9, 0), 5, 16, 5, 16, 18)


def test_cpu_only_inspector_shows_measurements_and_says_why_gpus_are_missing(cpu_benchmark):
    inspector = HardwareInspector(benchmark=cpu_benchmark)
    rows = inspector.comparison_rows()
    assert [r[1] for r in rows[:2]] == ["CPU memory copy", "CPU matmul fp32"]
    assert any("not measured" in r[2] for r in rows)  # the GPU rows, with their reason
    assert "CPU memory copy" in inspector.comparison.value
    assert [trace.name for trace in inspector.figure.data] == ["measured"]
    assert all(y > 0 for y in inspector.figure.data[0].y)
    if not inspector.report.gpus:
        assert "no GPUs to connect" in inspector.interconnect.value


def test_gpu_measurements_sit_beside_the_datasheet():
    measured = HardwareBenchmark(
        measurements=(
            Measurement("device→device copy", 2900.0, "GB/s", ""),
            Measurement("GPU matmul bf16", 700.0, "TFLOP/s", ""),
        ),
        skipped=(),
        gpu="NVIDIA H100 80GB HBM3",
        quick=True,
        seconds=1.0,
    )
    inspector = HardwareInspector(report=_report_with([H100]), benchmark=measured)
    rows = {r[1]: r for r in inspector.comparison_rows()}
    assert rows["device→device copy"][3] == "3350 GB/s" and rows["device→device copy"][4] == "87%"
    assert rows["GPU matmul bf16"][3] == "989.4 TFLOP/s" and rows["GPU matmul bf16"][4] == "71%"
    assert (
        "gen 5 ×16" in inspector.interconnect.value and "NVLink 4: 900 GB/s" in inspector.interconnect.value
    )
    assert [t.name for t in inspector.figure.data] == ["measured", "datasheet"]
    assert inspector.datasheets()[0].name == "H100 SXM"


def test_measure_button_runs_the_benchmark(monkeypatch, cpu_benchmark):
    import workbench.widgets.hardware as hardware

    monkeypatch.setattr(hardware, "benchmark_hardware", lambda repeats: cpu_benchmark)
    inspector = HardwareInspector(report=_report_with([]))
    assert inspector.comparison_rows() == [] and "Measure" in inspector.comparison.value
    inspector.measure_button.click()
    assert inspector.benchmark is cpu_benchmark and inspector.comparison_rows()
    assert not inspector.measure_button.disabled


def _estimator(**kwargs):
    torch.manual_seed(0)
    return Estimator(
        models.mlp(64, 10, hidden=(128, 128)), torch.zeros(1, 64), samples_per_epoch=1437, **kwargs
    )


def test_estimator_answers_for_the_slider_values():
    estimator = _estimator(hardware_name="L4")
    single = estimator.estimate()
    assert single.fits and single.comm.sent_bytes == 0 and single.steps_per_epoch == 23
    assert "fits" in estimator.answer.value and "single on 1 × L4" in estimator.answer.value
    estimator.strategy.value = "ddp"
    estimator.devices.value = 4
    ddp = estimator.estimate()
    gradient_bytes = 4 * estimator.profile.param_count  # the ring all-reduce sends 2(N-1)/N of them
    assert ddp.steps_per_epoch == 6 and ddp.comm.sent_bytes == pytest.approx(1.5 * gradient_bytes)
    assert "±5%, traced (checked" in estimator.answer.value  # how sure the memory figure is, and why
    assert ddp.memory.total > single.memory.total  # DDP's gradient buckets
    estimator.strategy.value = "fsdp"
    assert estimator.estimate().memory.params < single.memory.params
    estimator.strategy.value = "pipeline"  # not traced: the rules, with their wider band
    assert "±85%, analytic" in estimator.answer.value


def test_estimator_chart_has_a_bar_per_strategy_and_the_memory_line():
    estimator = _estimator(hardware_name="H100 SXM")
    names = list(estimator.figure.data[0].x)
    assert len(names) == len(STRATEGIES) and names[0] == "single ×1"
    assert estimator.figure.layout.shapes[0].y0 == pytest.approx(80.0)


def test_a_gpu_s_memory_figure_says_when_a_cpu_checked_it():
    """Checked by real steps on this CPU, the figure for a GPU leaves out cuDNN's and cuBLAS's workspaces
    (an H100 held 2.7× a GRU's CPU-made estimate): the answer says so for a GPU, not for this CPU."""
    estimator = _estimator(hardware_name="H100 SXM")
    assert estimator.estimate().memory.checked_on == "cpu"
    answer = html.unescape(estimator.answer.value)
    assert "on this CPU; a GPU's cuDNN and cuBLAS workspaces are not in it" in answer
    estimator.strategy.value = "pipeline"  # the rules: no real steps checked them
    assert "±85%, analytic" in estimator.answer.value and "on this CPU" not in estimator.answer.value


def test_the_averaged_weights_box_adds_their_copy_to_every_strategy_s_bar_and_the_answer():
    estimator = _estimator(hardware_name="H100 SXM")
    plain = estimator.estimate().memory
    assert "weight average" not in estimator.answer.value
    assert [bar.name for bar in estimator.figure.data][-1] == "comm buffers"
    estimator.averaged_weights.value = True  # as a click does
    averaged = estimator.estimate().memory
    # an fp32 copy of the parameters (the MLP has no buffers)
    assert averaged.weight_average == 4 * estimator.profile.param_count
    assert averaged.total == plain.total + averaged.weight_average
    assert "weight average" in estimator.answer.value
    bar = estimator.figure.data[-1]
    assert bar.name == "weight average" and len(bar.x) == len(STRATEGIES)
    fsdp = dict(zip(bar.x, bar.y, strict=True))[f"fsdp ×{max(estimator.devices.value, 2)}"]
    assert fsdp * 2**30 == pytest.approx(averaged.weight_average / 2)  # sharded over 2 devices


def test_the_activation_checkpointing_box_trades_the_blocks_activations_for_their_forward_again():
    lm = models.transformer_lm(65, 32, d_model=32, n_heads=2, n_layers=4)
    sample = torch.zeros(1, 32, dtype=torch.long)
    estimator = Estimator(lm, sample, samples_per_epoch=1000, batch_size=32, method="traced")
    kept = estimator.estimate()
    estimator.recomputed_blocks.value = True  # as a click does
    recomputed = estimator.estimate()
    assert recomputed.memory.total < 0.7 * kept.memory.total
    ratio = recomputed.time.compute_s / kept.time.compute_s
    assert 1.2 < ratio < 4 / 3, ratio  # the blocks' forward once more, not the head's
    estimator.strategy.value = "pipeline"  # the rules cannot say what recomputing saves: it says so
    answer = estimator.answer.value
    assert "Not possible" in answer and "estimated by tracing a step" in answer
    assert _estimator().recomputed_blocks.disabled  # an MLP has no repeated blocks


def test_the_largest_batch_button_moves_the_slider_to_the_largest_batch_that_fits():
    from workbench.estimate import largest_batch_size

    small = hardware_from_benchmark("256 MiB", memory_bytes=256 << 20, copy_gbs=10.0, matmul_gflops=100.0)
    estimator = _estimator(hardware={"256 MiB": small}, method="analytic")  # the rules: exact, and quick
    estimator.largest_button.click()
    expected = largest_batch_size(estimator.model, memory_bytes=256 << 20, sample=torch.zeros(1, 64),
                                  method="analytic")  # fmt: skip
    assert estimator.batch_size.value == expected.batch_size > 4096  # the slider's range grew to it
    assert "per device: " in estimator.largest_answer.value and estimator.estimate().fits
    estimator.strategy.value, estimator.devices.value = "single", 3  # not possible: said beside the button
    estimator.largest_button.click()
    assert "devices=3 with strategy='single'" in html.unescape(estimator.largest_answer.value)


def test_a_combination_that_cannot_be_shows_why():
    estimator = _estimator()
    estimator.devices.value = 3  # single strategy on 3 devices
    assert "Not possible" in estimator.answer.value and "devices" in estimator.answer.value
    assert repr(estimator).startswith("Estimator(single on 3: not possible: devices=3 with strategy='single'")


def test_measured_cpu_hardware_plugs_in(cpu_benchmark):
    cpu = hardware_from_benchmark(
        "this CPU",
        memory_bytes=8 << 30,
        copy_gbs=cpu_benchmark.get("CPU memory copy").value,
        matmul_gflops=cpu_benchmark.get("CPU matmul fp32").value,
    )
    estimator = _estimator(hardware={"this CPU": cpu})
    assert estimator.estimate().time.step_s > 0
    assert "±5%, traced (checked" in estimator.answer.value and "on this CPU" not in estimator.answer.value


def test_bad_estimator_arguments():
    with pytest.raises(ValueError, match="hardware_name='TPU'"):
        _estimator(hardware_name="TPU")
    with pytest.raises(ValueError, match="samples_per_epoch"):
        Estimator(models.linear(10), torch.zeros(1, 10), samples_per_epoch=0)
    with pytest.raises(ValueError, match="hardware must name at least one device"):
        _estimator(hardware={})
