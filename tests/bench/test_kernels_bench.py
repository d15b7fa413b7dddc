"""The kernel benchmark: what it says without a GPU, its table, and its measuring code on tiny inputs."""

import sys

import pytest
import torch

from workbench.bench import kernels as bench
from workbench.bench.kernels import KernelBenchmark, KernelRow, benchmark_kernels, main


def _no_gpu(monkeypatch):
    monkeypatch.setattr(bench, "no_gpu_reason", lambda: "torch.cuda.is_available() is False (test)")


def test_main_without_a_gpu_prints_why_and_succeeds(monkeypatch, capsys):
    _no_gpu(monkeypatch)
    assert main([]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["no CUDA GPU: torch.cuda.is_available() is False (test)", bench.NO_GPU_OPTIONS]
    assert "--static" in printed[1] and "--host" in printed[1]  # what runs here instead
    assert main(["--full", "--repeats", "2"]) == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_on_this_machine_without_a_gpu_nothing_runs(capsys):
    result = benchmark_kernels(repeats=1)
    assert result.rows == () and result.gpu is None
    assert result.table().startswith("no CUDA GPU: torch.cuda.is_available() is False")
    assert "no CUDA GPU" in result._repr_html_()
    assert main([]) == 0
    assert capsys.readouterr().out.startswith("no CUDA GPU: ")


def test_bad_repeats_are_reported(capsys):
    assert main(["--repeats", "0"]) == 2
    assert "repeats must be an integer ≥ 1, got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="repeats must be an integer ≥ 1"):
        benchmark_kernels(repeats=0)


def test_numba_on_its_simulator_is_a_reason(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delitem(sys.modules, "numba.cuda", raising=False)
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    assert bench.no_gpu_reason() == "numba would run on its CPU simulator (set by NUMBA_ENABLE_CUDASIM=1)"
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "0")
    assert bench.no_gpu_reason() is None


def test_rows_and_table_from_fake_measurements():
    matmul = KernelRow(
        "matmul register", "4096³", "torch.mm", 0.02, 0.01, 2 * 4096**3, 3 * 4 * 4096**2, "GFLOP/s", 5e4
    )
    adam = KernelRow("Adam", "100M params", "Adam(fused=True)", 1e-3, 2e-3, 15e8, 28e8, "GB/s", None)
    assert matmul.ratio == 0.5 and adam.ratio == 2.0
    assert matmul.ours == pytest.approx(6871.9, rel=1e-4) and adam.torch == pytest.approx(1400.0)
    assert matmul.of_peak == pytest.approx(6871.9 / 5e4, rel=1e-4) and adam.of_peak is None
    assert matmul.intensity == pytest.approx(4096 / 6)
    result = KernelBenchmark((matmul, adam), "Fake GPU", None, 3000.0, 5e4, False, 12.5)
    lines = result.table().splitlines()
    assert lines[0].split() == [
        "kernel",
        "size",
        "ours",
        "torch",
        "unit",
        "ours/torch",
        "of",
        "peak",
        "torch",
        "counterpart",
    ]
    assert lines[2].split() == [
        "matmul",
        "register",
        "4096³",
        "6,872",
        "13,744",
        "GFLOP/s",
        "0.50",
        "14%",
        "torch.mm",
    ]
    assert lines[3].split() == [
        "Adam",
        "100M",
        "params",
        "2,800",
        "1,400",
        "GB/s",
        "2.00",
        "Adam(fused=True)",
    ]
    assert lines[-1] == "device peaks (measured): copy 3,000 GB/s, fp32 matmul 50,000 GFLOP/s"
    html = result._repr_html_()
    assert (
        "Kernel benchmark on Fake GPU (full, 12.5 s)" in html
        and "<td style='text-align:left'>14%</td>" in html
    )


def test_every_measured_pair_runs_on_tiny_inputs():
    """The GPU path's row builders on the simulator's CPU tensors (or the GPU); the measure just calls."""
    from workbench.kernels._numba import on_simulator

    device = torch.device("cpu" if on_simulator() else "cuda")
    generator = torch.Generator(device).manual_seed(0)
    calls = []

    def measure(name, size, counterpart, ours, theirs, flops, moved, unit):
        ours(), theirs()
        calls.append(name)
        return KernelRow(name, size, counterpart, 1.0, 1.0, flops, moved, unit)

    rows = [
        *bench._matmul_rows(measure, 5, device, generator),
        *bench._matmul_rows(measure, (8, 4, 12), device, generator, methods=("register", "vector")),
        *bench._reduction_rows(measure, 9, device, generator),
        *bench._optimizer_rows(measure, 7, device, generator),
        *bench._clip_rows(measure, 20, device, generator),
        *bench._xent_rows(measure, 3, 4, device, generator),
    ]
    assert calls == [row.name for row in rows] and len(rows) == 18
    assert {row.unit for row in rows[:10]} == {"GFLOP/s"} and {row.unit for row in rows[10:]} == {"GB/s"}
    optimizers = [(row.name, row.size, row.counterpart) for row in rows[12:16]]
    assert optimizers == [
        ("SGD momentum", "7 params", "SGD(fused=True)"),
        ("Adam", "7 params", "Adam(fused=True)"),
        ("AdamW", "7 params", "AdamW(fused=True)"),
        ("Adam", "200 params in 200 tensors", "Adam(fused=True)"),
    ]
    assert [(row.name, row.size) for row in rows[7:10]] == [
        ("matmul vector A@Bᵀ", "5³"),
        ("matmul register", "8×4×12"),
        ("matmul vector", "8×4×12"),
    ]
    assert rows[9].flops == 2 * 8 * 4 * 12


def test_the_workbench_command_runs_the_kernel_benchmark(capsys):
    from workbench.cli import main as workbench_main

    assert workbench_main(["bench", "kernels", "--repeats", "1"]) == 0
    assert capsys.readouterr().out.strip()


def test_the_host_benchmark_shows_one_launch_per_group_against_one_per_tensor(capsys):
    from workbench.bench.optimizer_host import benchmark_optimizer_host

    result = benchmark_optimizer_host(tensor_counts=(4, 64), repeats=3, steps=3)
    launches = {(r[0], r[1], r[2]): r[3] for r in result.rows}
    assert launches[(64, False, "one launch per group")] == 1
    assert launches[(64, True, "one launch per group")] == 2  # the norm's reduction, then Adam
    assert launches[(64, False, "one launch per tensor")] == 64
    assert launches[(64, True, "one launch per tensor")] == 3 * 64  # clipping: a sum and a scale per tensor
    assert main(["--host", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "per tensor ÷ one launch" in out and "launches stubbed" in out
    assert main(["--host", "--repeats", "0"]) == 2
