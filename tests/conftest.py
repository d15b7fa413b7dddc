"""Shared test helpers: the repository root, free ports, small fast data, and a stand-in for NVML."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from workbench.data import load_dataset, split_dataset
from workbench.parallel.launching.launcher import free_port as _free_port

REPO = Path(__file__).resolve().parent.parent
GPU_TESTS = REPO / "tests" / "gpu"


def pytest_collection_modifyitems(items):
    """Every test under tests/gpu is marked ``gpu`` (``pytest -m gpu`` selects them); without a CUDA GPU
    each skips with the reason, and `workbench gpu-check` runs them on a machine with one."""
    import torch

    reason = None if torch.cuda.is_available() else _no_gpu_reason(torch)
    for item in items:
        if GPU_TESTS in Path(item.path).parents:
            item.add_marker(pytest.mark.gpu)
        if reason is not None and item.get_closest_marker("gpu") is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def _no_gpu_reason(torch) -> str:
    build = " (a CPU-only torch build)" if torch.version.cuda is None else ""
    return (
        f"needs a CUDA GPU: torch.cuda.is_available() is False{build}; `workbench gpu-check` runs it on one"
    )


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """Call it for a TCP port on 127.0.0.1 that is free now (servers, rendezvous)."""
    return _free_port


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory):
    """This checkout's wheel in a fresh venv outside the repository (tests/installed_wheel.py)."""
    from tests.installed_wheel import install_wheel

    return install_wheel(tmp_path_factory.mktemp("installed-wheel"))


@pytest.fixture(scope="session")
def digits_splits():
    return split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0)


@pytest.fixture(scope="session")
def regression_splits():
    return split_dataset(load_dataset("regression", n_samples=600, noise=0.1), (0.8, 0.1, 0.1), seed=0)


class FakeNvml:
    """Answers like pynvml for the GPUs described in ``gpus`` (dicts), or fails nvmlInit."""

    NVML_NVLINK_MAX_LINKS = 6
    NVML_FEATURE_ENABLED = 1

    class NVMLError(Exception):
        pass

    def __init__(self, gpus=(), *, init_error: str | None = None):
        self.gpus = list(gpus)
        self.init_error = init_error
        self.open = False
        self.shutdowns = 0

    def nvmlInit(self):
        if self.init_error:
            raise self.NVMLError(self.init_error)
        self.open = True

    def nvmlShutdown(self):
        self.open = False
        self.shutdowns += 1

    def _gpu(self, handle):
        assert self.open, "queried NVML before nvmlInit"
        return self.gpus[handle]

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle)["name"]

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle:04d}"

    def nvmlDeviceGetMemoryInfo(self, handle):
        gpu = self._gpu(handle)
        return type("Memory", (), {"total": gpu["memory"], "used": gpu.get("used", 0)})()

    # Live counters (workbench.monitor); a GPU dict without "power_mw"/"pcie_kb" reports Not Supported.
    NVML_TEMPERATURE_GPU = 0
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1

    def nvmlDeviceGetUtilizationRates(self, handle):
        return type("Utilization", (), {"gpu": self._gpu(handle).get("util", 0), "memory": 0})()

    def nvmlDeviceGetPowerUsage(self, handle):
        if "power_mw" not in self._gpu(handle):
            raise self.NVMLError("Not Supported")
        return self._gpu(handle)["power_mw"]

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return self._gpu(handle).get("temp", 40)

    def nvmlDeviceGetPcieThroughput(self, handle, counter):
        if "pcie_kb" not in self._gpu(handle):
            raise self.NVMLError("Not Supported")
        return self._gpu(handle)["pcie_kb"][counter]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        """``processes``: {pid: bytes or None} per GPU dict, as pynvml's process-info objects."""
        return [
            type("ProcessInfo", (), {"pid": pid, "usedGpuMemory": used})()
            for pid, used in self._gpu(handle).get("processes", {}).items()
        ]

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self._gpu(handle)["capability"]

    def _pcie(self, handle, key):
        if "pcie" not in self._gpu(handle):
            raise self.NVMLError("Not Supported")
        return self._gpu(handle)["pcie"][key]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._pcie(handle, 0)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._pcie(handle, 1)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._pcie(handle, 2)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._pcie(handle, 3)

    def nvmlDeviceGetNvLinkState(self, handle, link):
        links = self._gpu(handle).get("nvlinks")
        if links is None or link >= len(links):
            raise self.NVMLError("Not Supported")
        return links[link]


@pytest.fixture
def fake_nvml():
    return FakeNvml


@pytest.fixture
def profiler_warnings(monkeypatch) -> Iterator[list[warnings.WarningMessage]]:
    """torch.profiler as torch 2.10 and 2.11 run it (the GPU machines' torch): every profile started without
    ``acc_events=True`` warns "Profiler clears events at the end of each cycle" (pytorch#180348, fixed
    after 2.11), which a notebook cell shows on stderr. The list fills with the warnings a test raises."""
    import warnings

    from torch.profiler import profiler

    prepare_trace = profiler._KinetoProfile.prepare_trace

    def prepare_trace_as_in_2_11(self) -> None:
        if not self.acc_events:
            warnings.warn("Profiler clears events at the end of each cycle.", UserWarning, stacklevel=2)
        prepare_trace(self)

    monkeypatch.setattr(profiler._KinetoProfile, "prepare_trace", prepare_trace_as_in_2_11)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
