"""Every kernel the package launches, compiled by NVIDIA's real compiler for sm_80 and sm_90 (no GPU needed):
no local-memory spills, no float64, launchable with its registers and shared memory, whole warps, the
occupancy its launch counts on. And the checks do fail on kernels that break them.

Needs the ``toolchain`` extra (NVVM, NVRTC, ptxas, nvdisasm from pip). ``make test`` installs it and sets
WORKBENCH_REQUIRE_TOOLCHAIN=1, so there a missing toolchain fails; elsewhere these tests skip with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.kernels.static import ARCHS, TOOLCHAIN_EXTRA, all_targets, find_tool, static_reports

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module", autouse=True)
def toolchain():
    missing = [tool for tool in ("ptxas", "nvdisasm") if find_tool(tool) is None]
    if missing:
        message = f"NVIDIA's toolchain is missing ({', '.join(missing)}): {TOOLCHAIN_EXTRA}"
        if os.environ.get("WORKBENCH_REQUIRE_TOOLCHAIN"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def reports():
    return static_reports()


def test_every_launched_kernel_is_compiled_for_each_architecture(reports):
    compiled = {(r["name"], r["arch"]) for r in reports}
    assert compiled == {(t.name, arch) for t in all_targets() for arch in ARCHS}


def test_no_kernel_spills_uses_float64_or_misses_its_launch(reports):
    failing = {f"{r['name']} ({r['arch']})": r["problems"] for r in reports if r["problems"]}
    assert failing == {}


def test_the_register_matmul_is_mostly_multiply_adds(reports):
    """The 128×128 register tiling: its main loop is at least half FFMA (the issue's target)."""
    for report in reports:
        if report["name"].startswith("matmul register"):
            assert report["ffma_share"] >= 0.5, report
            assert report["threads"] == 256 and report["registers"] <= 255


def test_the_vector_matmul_reads_its_slabs_four_floats_at_a_time(reports):
    """Per k a thread reads its 8 values of a and 8 of b in four 128-bit shared loads (8 k per slab: 32
    LDS; one float at a time would be 128) for 64 FFMA, and its loop is at least 80% FFMA."""
    vector = [report for report in reports if report["name"].startswith("matmul vector")]
    assert len(vector) == 2 * 4 * 2  # two architectures, four transposed forms, 128×128 and 64×64 tiles
    for report in vector:
        assert report["opcodes"]["LDS"] == 32 and report["opcodes"]["FFMA"] == 512, report["opcodes"]
        assert report["ffma_share"] >= 0.8, report


def test_the_reductions_end_in_warp_shuffles(reports):
    """The last 32 partial results go to lane 0 through registers (5 steps), not 5 more shared-memory rounds:
    one SHFL per step for the sums, two (max and sum) for cross-entropy's rows."""
    for report in reports:
        if report["name"] in ("sum", "squared norm"):
            assert report["opcodes"].get("SHFL") == 5, report["opcodes"]
        if report["name"].startswith("xent forward"):
            assert report["opcodes"].get("SHFL", 0) >= 10, report["opcodes"]


@pytest.mark.parametrize("arch", ARCHS)
def test_the_checks_fail_on_kernels_that_break_them(arch):
    environment = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    done = subprocess.run(
        [sys.executable, str(HERE / "static_failures_case.py"), arch],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert any("spill" in p for p in found["spills"]), found["spills"]
    assert found["float64"] == ["float64 instructions in an fp32 kernel"]
    assert any(p.startswith("cannot launch") for p in found["too many threads"]), found
    assert any("not a whole number of warps" in p for p in found["partial warps"]), found
    assert any("the launch counts on 16" in p for p in found["occupancy"]), found


def test_a_report_compiled_once_is_kept_and_read_back(tmp_path, monkeypatch):
    """Reports are cached under a digest of the sources and tools: a second call reads them (shown by a
    report altered in the cache coming back as altered) instead of compiling again."""
    from workbench.kernels.static import reports_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = static_reports(archs=("sm_90",), kernels=("sum",))
    [kept] = list(reports_cache().glob("*-sm_90.json"))
    altered = {**json.loads(kept.read_text()), "registers": 254}
    kept.write_text(json.dumps(altered))
    again = static_reports(archs=("sm_90",), kernels=("sum",))
    assert first[0]["registers"] < 254 and again[0]["registers"] == 254


NUMPY_2_5 = """
import os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
import numpy as np
np.__dict__.pop("row_stack", None)  # numpy 2.5 removed it; numba-cuda 0.30 registers it when typing
assert not hasattr(np, "row_stack")
if sys.argv[1] == "numba alone":
    from numba import cuda

    def probe(x):
        x[0] = 1.0

    cuda.compile_ptx(probe, "void(float32[:])")
else:
    from workbench.kernels.reduce import gpu_targets
    from workbench.kernels.static import target_ptx

    assert ".version" in target_ptx(gpu_targets()[0])
print("compiled")
"""


def test_kernels_compile_on_numpy_2_5_which_numba_cuda_0_30_alone_cannot():
    def compile_in_child(how):
        return subprocess.run(
            [sys.executable, "-c", NUMPY_2_5, how], capture_output=True, text=True, timeout=300
        )

    alone, ours = compile_in_child("numba alone"), compile_in_child("workbench")
    assert alone.returncode != 0 and "has no attribute 'row_stack'" in alone.stderr  # the bug, still there
    assert ours.returncode == 0 and ours.stdout.strip() == "compiled", ours.stderr[-2000:]
