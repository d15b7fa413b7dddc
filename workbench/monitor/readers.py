"""What the sampler reads: CPU and RAM through psutil (always), GPUs through NVML (when present).

Each reading is a plain dict, so it can be plotted, logged as JSON or sent across processes unchanged.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import psutil

Reading = dict[str, Any]


def read_cpu() -> Reading:
    """CPU use since the previous call (per core and overall, %) and RAM in bytes.

    The first call in a process primes psutil's counters and reports 0.0 utilisation.

    Example:
        >>> sorted(read_cpu())
        ['per_core', 'percent', 'ram_total', 'ram_used']
    """
    per_core = psutil.cpu_percent(interval=None, percpu=True)
    memory = psutil.virtual_memory()
    return {
        "percent": sum(per_core) / len(per_core) if per_core else 0.0,
        "per_core": per_core,
        "ram_used": int(memory.total - memory.available),
        "ram_total": int(memory.total),
    }


class ProcessReader:
    """CPU use and resident memory of chosen processes (a launch's workers, one per rank) through psutil.

    A process is primed on its first read (psutil measures CPU between two calls), so its first reading
    has ``cpu_cores`` None. A process that has exited is left out.

    Example:
        >>> import os
        >>> reader = ProcessReader()
        >>> first = reader.read({0: os.getpid()})
        >>> first[0]["rank"], first[0]["cpu_cores"], first[0]["rss"] > 0
        (0, None, True)
        >>> reader.read({0: os.getpid()})[0]["cpu_cores"] >= 0
        True
    """

    def __init__(self) -> None:
        self._processes: dict[int, psutil.Process] = {}

    def read(self, ranks: dict[int, int]) -> list[Reading]:
        """``{"rank", "pid", "cpu_cores", "rss"}`` for each rank → pid in `ranks` (cores: 1.0 = one busy)."""
        readings = []
        for rank, pid in sorted(ranks.items()):
            try:
                process = self._processes.get(pid)
                primed = process is not None
                if process is None:
                    process = self._processes[pid] = psutil.Process(pid)
                with process.oneshot():
                    percent = process.cpu_percent(interval=None)
                    rss = process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                self._processes.pop(pid, None)
                continue
            cores = percent / 100.0 if primed else None
            readings.append({"rank": rank, "pid": pid, "cpu_cores": cores, "rss": int(rss)})
        for pid in set(self._processes) - set(ranks.values()):  # a finished run's workers
            del self._processes[pid]
        return readings


class NvmlReader:
    """Per-GPU utilisation, memory, power, temperature and PCIe traffic through NVML.

    NVML is opened on the first `read` (not at construction or import) and shut by `close`. Without NVML
    (no driver, no library) `read` returns ``[]`` and `unavailable_reason` says why; it is tried once per
    open, and the reason stays readable after `close`. A value the GPU does not report (NVML "Not
    Supported") is None.

    Args:
        nvml: a pynvml-like module (tests pass a stand-in); default: ``pynvml`` from nvidia-ml-py.

    Example (one reading per GPU; none, and the reason, on a machine without an NVIDIA driver):
        >>> reader = NvmlReader()
        >>> readings = reader.read()
        >>> bool(readings) or reader.unavailable_reason.startswith("NVML unavailable")
        True
        >>> all({"index", "name", "utilization", "memory_used"} <= set(reading) for reading in readings)
        True
        >>> reader.close()
    """

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self._nvml = nvml
        self._handles: list[Any] | None = None
        self._tried = False  # nvmlInit attempted since the last close (don't retry a missing library)
        self.unavailable_reason: str | None = None
        self._lock = threading.Lock()  # `sample_once` may race the sampler thread to the first open

    def open(self) -> bool:
        """Initialise NVML if not yet done; True when GPUs can be read."""
        with self._lock:
            return self._open()

    def _open(self) -> bool:
        if self._handles is not None:
            return True
        if self._tried:
            return False
        self._tried, self.unavailable_reason = True, None
        try:
            nvml = self._nvml if self._nvml is not None else importlib.import_module("pynvml")
            self._nvml = nvml
            nvml.nvmlInit()
        except Exception as error:  # NVMLError_LibraryNotFound, ImportError, driver mismatch …
            self.unavailable_reason = f"NVML unavailable: {type(error).__name__}: {error}"
            return False
        try:
            count = nvml.nvmlDeviceGetCount()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except nvml.NVMLError as error:
            self.unavailable_reason = f"NVML failed to list GPUs: {error}"
            self._shutdown()
            return False
        return True

    def read(self) -> list[Reading]:
        """One dict per GPU (see the module docstring of `workbench.monitor`); ``[]`` without NVML."""
        if not self.open():
            return []
        assert self._handles is not None
        return [self._read_gpu(index, handle) for index, handle in enumerate(self._handles)]

    def process_memory(self) -> dict[int, tuple[int, int]]:
        """pid → (GPU index, bytes of GPU memory it uses) for the compute processes NVML lists; {} without
        NVML (some drivers and containers do not show other processes: then they are missing)."""
        if not self.open():
            return {}
        assert self._handles is not None and self._nvml is not None
        used: dict[int, tuple[int, int]] = {}
        for index, handle in enumerate(self._handles):
            for process in self._optional(self._nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []:
                memory = getattr(process, "usedGpuMemory", None)
                if isinstance(memory, int):  # None when the driver does not say
                    used[int(process.pid)] = (index, memory)
        return used

    def close(self) -> None:
        """Shut NVML (a later `read` tries to open it again); `unavailable_reason` is kept."""
        with self._lock:
            if self._handles is not None:
                self._handles = None
                self._shutdown()
            self._tried = False

    def __enter__(self) -> NvmlReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _shutdown(self) -> None:
        assert self._nvml is not None
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()

    def _read_gpu(self, index: int, handle: Any) -> Reading:
        nvml = self._nvml
        assert nvml is not None
        memory = self._optional(nvml.nvmlDeviceGetMemoryInfo, handle)
        utilization = self._optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        power_mw = self._optional(nvml.nvmlDeviceGetPowerUsage, handle)
        temperature = self._optional(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        tx_kb = self._optional(nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
        rx_kb = self._optional(nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
        name = self._optional(nvml.nvmlDeviceGetName, handle)
        return {
            "index": index,
            "name": name.decode() if isinstance(name, bytes) else (name or "unknown"),
            "utilization": None if utilization is None else float(utilization.gpu),
            "memory_used": None if memory is None else int(memory.used),
            "memory_total": None if memory is None else int(memory.total),
            "power_w": None if power_mw is None else power_mw / 1000.0,
            "temperature_c": None if temperature is None else float(temperature),
            "pcie_tx_bytes_per_s": None if tx_kb is None else tx_kb * 1024.0,  # NVML reports KB/s
            "pcie_rx_bytes_per_s": None if rx_kb is None else rx_kb * 1024.0,
        }

    def _optional(self, query: Callable[..., Any], *args: Any) -> Any:
        try:
            return query(*args)
        except self._nvml.NVMLError:  # type: ignore[union-attr]
            return None
