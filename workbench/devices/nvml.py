"""NVIDIA GPUs as NVML reports them: name, memory, driver, PCIe link and NVLink.

No NVML (no driver, no library, no GPU) means zero GPUs and a reason, never an error. NVML is initialised
and shut down inside each call: nothing stays open between calls.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class GpuInfo:
    """One GPU. Fields NVML does not report on this device are None.

    Example (an H100 SXM as NVML fills it in; `nvml_report` gives this machine's):
        >>> from workbench.devices import find_datasheet
        >>> gpu = GpuInfo(0, "NVIDIA H100 80GB HBM3", None, 80 * 2**30, (9, 0), 5, 16, 5, 16, 18)
        >>> sheet = find_datasheet(gpu.name)  # what its vendor promises, to set measurements against
        >>> sheet.name, sheet.memory_bandwidth_gbs, f"PCIe gen {gpu.pcie_generation} x{gpu.pcie_width}"
        ('H100 SXM', 3350, 'PCIe gen 5 x16')
    """

    index: int
    name: str
    uuid: str | None
    memory_total: int
    compute_capability: tuple[int, int] | None
    pcie_generation: int | None
    pcie_width: int | None
    pcie_max_generation: int | None
    pcie_max_width: int | None
    nvlinks_active: int | None


@dataclass(frozen=True)
class NvmlReport:
    """What NVML said: the GPUs, the driver version, or why it could not be asked (``error``).

    Example (GPUs and a driver, or none and the reason, e.g. "NVML unavailable: ... (no NVIDIA driver on
    this machine?)"):
        >>> report = nvml_report()
        >>> report.available == (report.error is None), report.available or report.gpus == ()
        (True, True)
    """

    gpus: tuple[GpuInfo, ...]
    driver_version: str | None
    cuda_driver_version: str | None
    error: str | None

    @property
    def available(self) -> bool:
        return self.error is None


def nvml_report(nvml: ModuleType | None = None) -> NvmlReport:
    """Ask NVML for every GPU; ``nvml`` defaults to the ``pynvml`` module (nvidia-ml-py).

    Example (the GPUs, or why NVML could not say: on a machine without an NVIDIA driver, the latter):
        >>> report = nvml_report()
        >>> report.error is None or report.gpus == ()
        True
    """
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return NvmlReport((), None, None, "nvidia-ml-py is not installed")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        return NvmlReport((), None, None, f"NVML unavailable: {error} (no NVIDIA driver on this machine?)")
    try:
        count = nvml.nvmlDeviceGetCount()
        gpus = tuple(_gpu_info(nvml, index) for index in range(count))
        driver = _optional(nvml, nvml.nvmlSystemGetDriverVersion)
        cuda = _optional(nvml, nvml.nvmlSystemGetCudaDriverVersion)
        cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
        return NvmlReport(gpus, _text(driver), cuda_text, None)
    except nvml.NVMLError as error:
        return NvmlReport((), None, None, f"NVML query failed: {error}")
    finally:
        with suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _gpu_info(nvml: ModuleType, index: int) -> GpuInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    capability = _optional(nvml, nvml.nvmlDeviceGetCudaComputeCapability, handle)
    return GpuInfo(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)) or "unknown",
        uuid=_text(_optional(nvml, nvml.nvmlDeviceGetUUID, handle)),
        memory_total=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        compute_capability=tuple(capability) if capability is not None else None,
        pcie_generation=_optional(nvml, nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        pcie_width=_optional(nvml, nvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        pcie_max_generation=_optional(nvml, nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        pcie_max_width=_optional(nvml, nvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        nvlinks_active=_active_nvlinks(nvml, handle),
    )


def _active_nvlinks(nvml: ModuleType, handle: object) -> int | None:
    """Links in state enabled; None when the device has no NVLink (every query unsupported)."""
    active, answered = 0, False
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        state = _optional(nvml, nvml.nvmlDeviceGetNvLinkState, handle, link)
        if state is not None:
            answered = True
            active += int(state == nvml.NVML_FEATURE_ENABLED)
    return active if answered else None


def _optional(nvml: ModuleType, query, *args):
    """The query's answer, or None where NVML says this device does not support it."""
    try:
        return query(*args)
    except nvml.NVMLError:
        return None


def _text(value: object) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
