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


# CUDA releases whose PTX ISA is not (major - 4).(minor): 12.6 kept 8.5, 12.8 and 12.9 brought 8.7 and 8.8
_PTX_EXCEPTIONS = {(12, 6): (8, 5), (12, 8): (8, 7), (12, 9): (8, 8)}


def _version(text: str) -> tuple[int, int]:
    major, minor = [*text.split("."), "0"][:2]
    return int(major), int(minor)


def newest_ptx_for_cuda(cuda: str) -> str:
    """The newest PTX ISA version a CUDA release (its compiler, or a driver for it) handles.

    Example:
        >>> newest_ptx_for_cuda("13.0"), newest_ptx_for_cuda("12.4"), newest_ptx_for_cuda("12.6")
        ('9.0', '8.4', '8.5')
    """
    major, minor = _version(cuda)
    ptx = _PTX_EXCEPTIONS.get((major, minor), (major - 4, minor))
    return f"{ptx[0]}.{ptx[1]}"


def ptx_driver_problem(ptx: str | None, driver_cuda: str | None) -> str | None:
    """Why a driver for CUDA `driver_cuda` cannot load the PTX version `ptx` numba emits, with the fix;
    None when it can (or when either is unknown).

    A driver JIT-compiles PTX up to its own CUDA's ISA and refuses newer PTX at load time
    (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), so the NVVM numba compiles with must not be newer than the driver.

    Example:
        >>> problem = ptx_driver_problem("9.5", "13.0")
        >>> problem.split(": ")[0]
        'numba emits PTX 9.5 (NVVM of CUDA 13.5) but the driver runs CUDA 13.0, which loads PTX up to 9.0'
        >>> problem.split("Fix: ")[1]
        "pip install 'nvidia-nvvm==13.0.*' (NVVM of the driver's CUDA), or a driver for CUDA 13.5"
        >>> ptx_driver_problem("9.0", "13.0") is None
        True
    """
    if ptx is None or driver_cuda is None:
        return None
    newest = newest_ptx_for_cuda(driver_cuda)
    if _version(ptx) <= _version(newest):
        return None
    driver_major, driver_minor = _version(driver_cuda)
    ptx_major, ptx_minor = _version(ptx)
    emitting_cuda = f"{ptx_major + 4}.{ptx_minor}"
    return (
        f"numba emits PTX {ptx} (NVVM of CUDA {emitting_cuda}) but the driver runs CUDA {driver_cuda}, which "
        f"loads PTX up to {newest}: kernels fail to load. Fix: pip install "
        f"'nvidia-nvvm=={driver_major}.{driver_minor}.*' (NVVM of the driver's CUDA), or a driver for CUDA "
        f"{emitting_cuda}"
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
