"""Device discovery: CPU, NVIDIA GPUs (NVML), CUDA in torch and numba, numba's simulator choice.

Importing this package starts nothing and sets nothing; see :mod:`workbench.devices.cuda` for how the
numba backend (GPU or CPU simulator) is chosen.
"""

from workbench.devices.cpu import CpuInfo, cpu_info
from workbench.devices.cuda import (
    SIMULATOR_VARIABLE,
    CudaStatus,
    NumbaBackend,
    choose_numba_backend,
    configure_numba,
    cuda_driver_found,
    cuda_status,
)
from workbench.devices.nvml import GpuInfo, NvmlReport, nvml_report
from workbench.devices.report import DeviceReport, device_report

__all__ = [
    "SIMULATOR_VARIABLE",
    "CpuInfo",
    "CudaStatus",
    "DeviceReport",
    "GpuInfo",
    "NumbaBackend",
    "NvmlReport",
    "choose_numba_backend",
    "configure_numba",
    "cpu_info",
    "cuda_driver_found",
    "cuda_status",
    "device_report",
    "nvml_report",
]
