"""`workbench bench kernels --static`: the work at the bench sizes, the roofline, and a compiled row."""

from __future__ import annotations

import os

import pytest

from workbench.bench.kernels_static import GPUS, StaticRow, kernel_work, static_prediction
from workbench.kernels.static import TOOLCHAIN_EXTRA, all_targets, find_tool


def test_every_kernel_has_its_work_at_both_sizes():
    for target in all_targets():
        for quick in (True, False):
            size, flops, moved = kernel_work(target.name, quick)
            assert size and flops > 0 and moved > 0, target.name


def test_full_sizes_are_the_issues_anchors():
    assert kernel_work("matmul register", quick=False) == ("4096³", 2 * 4096**3, 3 * 4096**2 * 4)
    assert kernel_work("adam", quick=False) == ("100M", 15 * 10**8, 28 * 10**8)  # 7 floats per parameter


def test_roofline_picks_the_slower_of_compute_and_memory():
    h100 = GPUS["sm_90"]
    loop = {"FFMA": 512, "LDS.128": 32, "IADD3": 40}  # 584 instructions, issue-bound
    report = {"name": "matmul vector", "arch": "sm_90", "ffma_share": 512 / 584, "main_loop": loop}
    compute = StaticRow(report, h100, "4096³", *kernel_work("matmul vector", False)[1:])
    assert compute.compute_bound and compute.roofline_s == pytest.approx(2 * 4096**3 / 67e12)
    assert compute.predicted_of_peak == pytest.approx((512 / 4) / (584 / 2.69))
    memory = StaticRow({"name": "adam", "ffma_share": 0.18}, h100, "100M", *kernel_work("adam", False)[1:])
    assert not memory.compute_bound and memory.roofline_s == pytest.approx(28e8 / 3350e9)
    assert memory.predicted_of_peak is None


def test_a_compiled_prediction_labels_itself_predicted():
    if find_tool("ptxas") is None or find_tool("nvdisasm") is None:
        message = f"NVIDIA's toolchain is missing: {TOOLCHAIN_EXTRA}"
        if os.environ.get("WORKBENCH_REQUIRE_TOOLCHAIN"):
            pytest.fail(message)
        pytest.skip(message)
    table = static_prediction(kernels=("matmul tiled",)).table()
    assert "roofline ms (predicted)" in table and "of FP32 peak (predicted)" in table
    assert "matmul tiled  A100 SXM 80GB" in table and "matmul tiled  H100 SXM" in table


def test_an_unknown_kernel_name_lists_the_known_ones(capsys):
    from workbench.kernels.static import main

    with pytest.raises(SystemExit) as exit_:
        main(["--kernel", "matmul strassen"])
    assert exit_.value.code == 2
    assert (
        "--kernel 'matmul strassen' is not a kernel; known: matmul naive, matmul tiled"
        in capsys.readouterr().err
    )


def test_full_sizes_put_the_h100s_measured_time_beside_the_prediction():
    """measured / predicted for the register matmul: the model's time (roofline / predicted fraction of
    peak) against the time the stored H100 report's rate gives."""
    from workbench.bench.gpu_report import Check, GpuReport
    from workbench.bench.kernels_static import StaticPrediction

    work = kernel_work("matmul register", False)
    loop = {"FFMA": 512, "LDS.32": 128, "IMAD": 300, "IADD3": 5}  # issue-bound: 36% of peak
    compiled = {"name": "matmul register", "ffma_share": 0.54, "registers": 216, "shared_bytes": 8448}
    compiled["main_loop"] = loop
    h100 = StaticRow({**compiled, "occupancy": 0.125, "arch": "sm_90"}, GPUS["sm_90"], *work)
    a100 = StaticRow({**compiled, "occupancy": 0.125, "arch": "sm_80"}, GPUS["sm_80"], *work)
    timed = Check("matmul register 4096³", 0.45, "× torch", "", "", None, "20,000 GFLOP/s, 45% of peak")
    report = GpuReport({"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-26"}, [timed], [], 0.0)
    table = StaticPrediction((a100, h100), quick=False, measured=report).table()
    predicted = 2 * 4096**3 / 67e12 / ((512 / 4) / (945 / 2.69))
    assert "36% (issue)" in table
    measured = 2 * 4096**3 / 20e12
    assert "measured / predicted" in table and f"{measured / predicted:.2f}" in table
    assert f"{1e3 * measured:.3g}" in table and "measured: NVIDIA H100 80GB HBM3, 2026-11-26" in table
    assert StaticPrediction((h100,), quick=True).table().count("measured") == 0  # quick sizes: not measured
