"""One report of everything workbench can run on: CPU, GPUs (NVML), CUDA in torch and numba.

>>> from workbench.devices import device_report
>>> report = device_report()
>>> print(report)  # doctest: +SKIP

In a terminal that prints a text table; in a notebook the report displays as an HTML table.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

from workbench._distribution import DISTRIBUTION
from workbench.devices.cpu import CpuInfo, allocator, cpu_info
from workbench.devices.cuda import CudaStatus, cuda_status
from workbench.devices.nvml import GpuInfo, NvmlReport, nvml_report
from workbench.devices.toolchain import (
    PACKAGES,
    TOOLCHAIN_EXTRA,
    ToolchainStatus,
    ptx_driver_problem,
    toolchain_status,
)
from workbench.tables import html_table, text_table

REPORTED_PACKAGES = ("workbench", "torch", "numba", "numba-cuda", "nvidia-ml-py", "jupyterlab", "ipywidgets")
HEADERS = ("section", "item", "value")
# workbench is installed under its distribution's name (`workbench` on the public index is another project)
DISTRIBUTIONS = {"workbench": DISTRIBUTION}


@dataclass(frozen=True)
class DeviceReport:
    """The machine as workbench sees it; ``rows()`` is the table, ``str()`` prints it.

    Example (``print(device_report())`` shows it all; ``workbench doctor`` adds what to fix):
        >>> report = device_report()
        >>> sections = [section for section, _, _ in report.rows() if section]
        >>> sections[:3], sections[-2:]
        (['system', 'cpu', 'nvml'], ['cuda', 'compiler'])
    """

    python: str
    platform: str
    packages: dict[str, str | None]
    cpu: CpuInfo
    nvml: NvmlReport
    cuda: CudaStatus
    toolchain: ToolchainStatus = field(default_factory=toolchain_status)
    allocator: str = field(default_factory=allocator)

    @property
    def gpus(self) -> tuple[GpuInfo, ...]:
        return self.nvml.gpus

    def rows(self) -> list[tuple[str, str, str]]:
        """(section, item, value) rows, the section named on its first row only."""
        sections = [
            ("system", self._system_rows()),
            ("cpu", self._cpu_rows()),
            ("nvml", self._nvml_rows()),
            *((f"gpu {gpu.index}", _gpu_rows(gpu)) for gpu in self.gpus),
            ("cuda", self._cuda_rows()),
            ("compiler", self._toolchain_rows()),
        ]
        return [
            (name if i == 0 else "", item, value)
            for name, items in sections
            for i, (item, value) in enumerate(items)
        ]

    def __str__(self) -> str:
        return text_table(HEADERS, self.rows())

    def _repr_html_(self) -> str:
        return html_table(HEADERS, self.rows(), caption="workbench device report")

    def _system_rows(self) -> list[tuple[str, str]]:
        rows = [("python", f"{self.python} ({self.platform})")]
        rows += [(name, v or "not installed") for name, v in self.packages.items()]
        return rows

    def _cpu_rows(self) -> list[tuple[str, str]]:
        cpu = self.cpu
        physical = cpu.physical_cores if cpu.physical_cores is not None else "?"
        return [
            ("model", cpu.model),
            ("cores", f"{physical} physical, {cpu.logical_cores} logical, {cpu.usable_cores} usable here"),
            ("memory", f"{_gib(cpu.memory_total)} total, {_gib(cpu.memory_available)} available"),
            ("allocator", self.allocator),
        ]

    def _nvml_rows(self) -> list[tuple[str, str]]:
        if not self.nvml.available:
            return [("status", self.nvml.error or ""), ("gpus", "0")]
        return [
            ("driver", f"{self.nvml.driver_version} (CUDA {self.nvml.cuda_driver_version})"),
            ("gpus", str(len(self.gpus))),
        ]

    def _cuda_rows(self) -> list[tuple[str, str]]:
        cuda = self.cuda
        build = f"CUDA {cuda.torch_cuda_build} build" if cuda.torch_cuda_build else "CPU-only build"
        if not cuda.driver_found:
            torch_state = "no CUDA driver: runs on CPU"
        elif cuda.torch_devices:
            torch_state = f"{len(cuda.torch_devices)} device(s): {', '.join(cuda.torch_devices)}"
        else:
            torch_state = "no usable device"
        rows = [
            ("driver library", "found" if cuda.driver_found else "not found"),
            ("torch", f"{cuda.torch_version}, {build}; {torch_state}"),
            ("numba backend", str(cuda.numba_backend)),
        ]
        if cuda.numba_devices:
            rows.append(("numba devices", ", ".join(cuda.numba_devices)))
        if cuda.ptx_version:
            rows.append(("numba PTX", f"version {cuda.ptx_version}"))
        if cuda.numba_devices:
            rows.append(
                ("numba kernel", f"failed: {cuda.kernel_error}" if cuda.kernel_error else "compiled and ran")
            )
        if cuda.error:
            rows.append(("problem", cuda.error))
        return rows

    def _toolchain_rows(self) -> list[tuple[str, str]]:
        toolchain = self.toolchain
        rows = [
            (what, f"{name} {found}" if found else "not installed")
            for name, found in toolchain.packages.items()
            for what in [PACKAGES[name]]
        ]
        rows += [(f"{tool} path", path or "not found") for tool, path in toolchain.tools.items()]
        if toolchain.missing:
            rows.append(("fix", f"{', '.join(toolchain.missing)} missing: {TOOLCHAIN_EXTRA}"))
        driver_cuda = self.nvml.cuda_driver_version if self.nvml.available else None
        if self.cuda.ptx_version:  # what numba really emits against what the driver loads
            note = ptx_driver_problem(self.cuda.ptx_version, driver_cuda)
        else:
            note = toolchain.driver_note(driver_cuda)
        if note:
            rows.append(("problem", note))
        return rows


def device_report(*, nvml: ModuleType | None = None) -> DeviceReport:
    """Collect the report now. Starts nothing and changes no setting in this process.

    Args:
        nvml: an NVML binding to ask instead of ``pynvml`` (tests pass a stand-in).
    """
    return DeviceReport(
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        packages={name: _installed_version(DISTRIBUTIONS.get(name, name)) for name in REPORTED_PACKAGES},
        cpu=cpu_info(),
        nvml=nvml_report(nvml),
        cuda=cuda_status(),
        toolchain=toolchain_status(),
        allocator=allocator(),
    )


def _gpu_rows(gpu: GpuInfo) -> list[tuple[str, str]]:
    rows = [("name", gpu.name), ("memory", _gib(gpu.memory_total))]
    if gpu.compute_capability:
        rows.append(("compute capability", "{}.{}".format(*gpu.compute_capability)))
    if gpu.pcie_generation is not None:
        link = f"gen {gpu.pcie_generation} x{gpu.pcie_width}"
        if gpu.pcie_max_generation is not None:
            link += f" (max gen {gpu.pcie_max_generation} x{gpu.pcie_max_width})"
        rows.append(("PCIe", link))
    rows.append(
        ("NVLink", "not reported" if gpu.nvlinks_active is None else f"{gpu.nvlinks_active} links active")
    )
    return rows


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"


def _installed_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None
