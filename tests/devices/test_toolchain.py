"""`workbench doctor` reports NVIDIA's compiler toolchain, with the install line that fixes a missing one and
a warning when the GPU's driver is older than the toolchain."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.devices import device_report
from workbench.devices.toolchain import PACKAGES, TOOLCHAIN_EXTRA, ToolchainStatus, toolchain_status

H100 = {"name": "NVIDIA H100 80GB HBM3", "memory": 80 * 2**30, "capability": (9, 0), "pcie": (5, 16, 5, 16)}
COMPLETE = ToolchainStatus(
    dict.fromkeys(PACKAGES, "13.5.37"), {"ptxas": "/x/ptxas", "nvdisasm": "/x/nvdisasm"}
)
NOTHING = ToolchainStatus(dict.fromkeys(PACKAGES), {"ptxas": None, "nvdisasm": None})


def _rows(report):
    """The compiler section's rows, item → value."""
    rows, section = {}, None
    for name, item, value in report.rows():
        section = name or section
        if section == "compiler":
            rows[item] = value
    return rows


def test_a_missing_toolchain_says_what_and_how_to_install_it(fake_nvml):
    report = dataclasses.replace(device_report(nvml=fake_nvml(init_error="no driver")), toolchain=NOTHING)
    rows = _rows(report)
    assert rows["NVVM"] == "not installed" and rows["ptxas path"] == "not found"
    assert rows["fix"] == f"NVVM, NVRTC, ptxas, nvdisasm missing: {TOOLCHAIN_EXTRA}"


def test_a_complete_toolchain_shows_versions_and_paths(fake_nvml):
    report = dataclasses.replace(device_report(nvml=fake_nvml(init_error="no driver")), toolchain=COMPLETE)
    rows = _rows(report)
    assert rows["NVVM"] == "nvidia-nvvm 13.5.37" and rows["nvdisasm path"] == "/x/nvdisasm"
    assert "fix" not in rows and "problem" not in rows


def test_a_driver_older_than_the_toolchain_is_a_problem_with_the_pins_that_fit(fake_nvml):
    report = dataclasses.replace(device_report(nvml=fake_nvml([H100])), toolchain=COMPLETE)  # CUDA 12.4
    problem = _rows(report)["problem"]
    assert problem.startswith("the driver supports CUDA 12.4, the toolchain is CUDA 13")
    assert "'nvidia-cuda-nvcc==12.*'" in problem
    assert COMPLETE.driver_note("13.0") is None and COMPLETE.driver_note(None) is None


def test_this_machine_has_what_make_test_installs():
    status = toolchain_status()
    assert set(status.packages) == set(PACKAGES) and set(status.tools) == {"ptxas", "nvdisasm"}
    assert status.complete == (status.missing == [])


@pytest.mark.parametrize(
    ("ptx", "driver_cuda", "verdict"),
    [
        ("9.5", "13.0", "pip install 'nvidia-nvvm==13.0.*'"),  # the pip NVVM 13.5 on a driver 580
        ("9.0", "13.0", None),
        ("9.0", "13.2", None),
        ("8.8", "12.9", None),
        ("8.7", "12.6", "pip install 'nvidia-nvvm==12.6.*'"),  # 12.6 kept PTX 8.5
        ("8.5", "12.6", None),
        ("8.4", "12.4", None),
        ("9.0", "12.4", "loads PTX up to 8.4"),
        (None, "12.4", None),
        ("9.5", None, None),
    ],
)
def test_the_ptx_numba_emits_against_what_the_driver_loads(ptx, driver_cuda, verdict):
    from workbench.devices.toolchain import ptx_driver_problem

    problem = ptx_driver_problem(ptx, driver_cuda)
    if verdict is None:
        assert problem is None
    else:
        assert verdict in problem and "kernels fail to load" in problem
