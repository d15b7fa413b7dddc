"""NVIDIA's compiler toolchain as workbench uses it: NVVM and NVRTC (numba compiles kernels to PTX with them),
ptxas and nvdisasm (`workbench.kernels.static` reads registers, spills and instructions). All install from
pip (the ``toolchain`` extra); none needs a GPU. Looking them up loads nothing.

Example:
    >>> status = toolchain_status()
    >>> status.complete == (not status.missing)
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from workbench._distribution import pip_install

TOOLCHAIN_EXTRA = pip_install("toolchain")
# pip package → what it brings
PACKAGES = {
    "nvidia-nvvm": "NVVM",
    "nvidia-cuda-nvrtc": "NVRTC",
    "nvidia-cuda-nvcc": "ptxas",
    "nvidia-cuda-nvdisasm": "nvdisasm",
}
TOOLS = ("ptxas", "nvdisasm")


@dataclass(frozen=True)
class ToolchainStatus:
    """Installed toolchain packages (name → version or None) and where ptxas and nvdisasm are found."""

    packages: dict[str, str | None]
    tools: dict[str, str | None]

    @property
    def missing(self) -> list[str]:
        """What is not there, by what it brings (e.g. ``["NVVM", "nvdisasm"]``)."""
        absent = [PACKAGES[name] for name, found in self.packages.items() if found is None]
        absent += [tool for tool, path in self.tools.items() if path is None and tool not in absent]
        return absent

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def cuda_major(self) -> int | None:
        """The CUDA major version of the pip toolchain (13 for nvidia-nvvm 13.x), if installed."""
        found = self.packages.get("nvidia-nvvm")
        return int(found.split(".")[0]) if found else None

    def driver_note(self, driver_cuda: str | None) -> str | None:
        """A warning when the GPU driver supports an older CUDA than the toolchain, whose PTX it then refuses.

        Example:
            >>> note = ToolchainStatus({"nvidia-nvvm": "13.5.37"}, {}).driver_note("12.4")
            >>> note.split(": ")[0]
            'the driver supports CUDA 12.4, the toolchain is CUDA 13'
            >>> "'nvidia-nvvm==12.*'" in note
            True
        """
        if driver_cuda is None or self.cuda_major is None:
            return None
        driver_major = int(driver_cuda.split(".")[0])
        if driver_major >= self.cuda_major:
            return None
        pins = " ".join(f"'{name}=={driver_major}.*'" for name in PACKAGES)
        return (
            f"the driver supports CUDA {driver_cuda}, the toolchain is CUDA {self.cuda_major}: kernels may "
            f"fail to load; pip install {pins}"
        )


def toolchain_status() -> ToolchainStatus:
    """What of the toolchain is installed (package metadata) and found (cuda.pathfinder; loads nothing)."""
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    tools: dict[str, str | None] = dict.fromkeys(TOOLS)
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
    except ImportError:  # numba-cuda brings cuda-pathfinder; without it nothing is found
        pass
    else:
        tools = {tool: find_nvidia_binary_utility(tool) for tool in TOOLS}
    return ToolchainStatus(packages, tools)
