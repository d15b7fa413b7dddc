import math

import pytest
import torch

from workbench.cli import main
from workbench.devices import microbench
from workbench.devices.microbench import HardwareBenchmark, Measurement, benchmark_hardware

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
without_cuda = pytest.mark.skipif(CUDA, reason="checks the behaviour on a machine without CUDA")
GPU_NAMES = (*microbench._GPU_COPIES, *microbench._GPU_MATMULS)
CPU_NAMES = ("CPU memory copy", "CPU matmul fp32")


@pytest.fixture(scope="module")
def result() -> HardwareBenchmark:
    return benchmark_hardware(repeats=1)


def test_cpu_numbers_are_positive_and_finite(result):
    for name, unit in zip(CPU_NAMES, ("GB/s", "GFLOP/s"), strict=True):
        measurement = result.get(name)
        assert math.isfinite(measurement.value) and measurement.value > 0, name
        assert measurement.unit == unit
    assert result.quick and result.seconds > 0


@without_cuda
def test_gpu_measurements_are_skipped_with_a_reason_without_cuda(result):
    reasons = dict(result.skipped)
    assert set(reasons) == set(GPU_NAMES) and result.gpu is None
    assert all(reason.startswith("no CUDA device") for reason in reasons.values())
    assert set(result.as_dict()) == set(CPU_NAMES)


def test_table_and_html_show_every_name(result):
    text, html = result.table(), result._repr_html_()
    for name in (*CPU_NAMES, *GPU_NAMES):
        assert name in text and name in html, name
    assert html.startswith("<table>") and "Hardware benchmark (quick" in html


def test_get_says_why_a_measurement_is_missing(result):
    assert isinstance(result.get("CPU memory copy"), Measurement)
    with pytest.raises(KeyError, match="no measurement 'TPU'"):
        result.get("TPU")
    skipped = HardwareBenchmark((), (("GPU matmul bf16", "no bf16 here"),), None, True, 0.0)
    with pytest.raises(KeyError, match="was skipped: no bf16 here"):
        skipped.get("GPU matmul bf16")


def test_device_cpu_skips_the_gpu():
    result = benchmark_hardware(repeats=1, device="cpu")
    assert result.gpu is None
    assert dict(result.skipped) == dict.fromkeys(GPU_NAMES, "device='cpu' was asked for")


@without_cuda
def test_device_cuda_without_cuda_raises():
    with pytest.raises(RuntimeError, match="device='cuda' was asked for, but no CUDA device"):
        benchmark_hardware(repeats=1, device="cuda")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"repeats": 0}, "repeats"),
        ({"repeats": 1.5}, "repeats"),
        ({"repeats": True}, "repeats"),
        ({"device": "gpu"}, "device"),
        ({"device": "cuda:0"}, "device"),
    ],
)
def test_bad_arguments_raise_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        benchmark_hardware(**kwargs)


@pytest.mark.parametrize("start", ["highest", "high", "medium"])
def test_matmul_precision_is_restored(start):
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(start)
    try:
        with microbench.float32_matmul_precision("highest"):
            assert torch.backends.cuda.matmul.allow_tf32 is False
        assert torch.get_float32_matmul_precision() == start
        with pytest.raises(ZeroDivisionError), microbench.float32_matmul_precision("high"):
            assert torch.backends.cuda.matmul.allow_tf32 is True
            _ = 1 / 0
        assert torch.get_float32_matmul_precision() == start
    finally:
        torch.set_float32_matmul_precision(saved)


def test_unreadable_precision_flags_skip_the_matmul(monkeypatch):
    def refuses() -> str:
        raise RuntimeError("mix of the legacy and new APIs")

    monkeypatch.setattr(torch, "get_float32_matmul_precision", refuses)
    result = benchmark_hardware(repeats=1, device="cpu")
    assert "CPU memory copy" in result.as_dict()
    assert "mix of the legacy and new APIs" in dict(result.skipped)["CPU matmul fp32"]


@without_cuda
def test_cli_prints_the_table_and_says_there_is_no_cuda(capsys):
    assert main(["bench", "hardware", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "CPU memory copy" in out and "GB/s" in out and "GFLOP/s" in out
    assert "no CUDA" in out and "host→device pinned" in out


def test_cli_rejects_bad_repeats(capsys):
    assert main(["bench", "hardware", "--repeats", "0"]) == 2
    assert "repeats must be an integer ≥ 1" in capsys.readouterr().err


@needs_cuda
def test_gpu_rows_are_present_and_positive():
    saved = torch.get_float32_matmul_precision()
    result = benchmark_hardware(repeats=2, device="cuda")
    assert torch.get_float32_matmul_precision() == saved
    assert result.gpu == torch.cuda.get_device_name()
    measured, skipped = result.as_dict(), dict(result.skipped)
    for name in (*microbench._GPU_COPIES, "GPU matmul fp32"):
        assert math.isfinite(measured[name]) and measured[name] > 0, name
    for name in ("GPU matmul tf32", "GPU matmul bf16"):  # older GPUs lack them, and say so
        assert (name in measured and measured[name] > 0) or skipped[name], name
    if "GPU matmul tf32" in measured:
        assert measured["GPU matmul tf32"] > measured["GPU matmul fp32"]
