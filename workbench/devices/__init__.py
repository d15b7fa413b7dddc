"""Device discovery: CPU, NVIDIA GPUs (NVML), CUDA in torch and numba, numba's simulator choice.

Importing this package starts nothing and sets nothing; see :mod:`workbench.devices.cuda` for how the
numba backend (GPU or CPU simulator) is chosen. Microbenchmarks (which import torch) live in
:mod:`workbench.devices.microbench`.
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
from workbench.devices.datasheets import DATASHEETS, GpuDatasheet, find_datasheet
from workbench.devices.nvml import GpuInfo, NvmlReport, nvml_report
from workbench.devices.report import DeviceReport, device_report

__all__ = [
    "DATASHEETS",
    "SIMULATOR_VARIABLE",
    "CpuInfo",
    "CudaStatus",
    "DeviceReport",
    "GpuDatasheet",
    "GpuInfo",
    "NumbaBackend",
    "NvmlReport",
    "choose_numba_backend",
    "configure_numba",
    "cpu_info",
    "cuda_driver_found",
    "cuda_status",
    "device_report",
    "find_datasheet",
    "nvml_report",
]
