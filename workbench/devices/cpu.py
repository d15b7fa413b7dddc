"""What the CPU side of this machine offers: model, cores, memory (through psutil)."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class CpuInfo:
    """The host's processor and memory.

    ``usable_cores`` is what this process may run on (its CPU affinity, which containers and Slurm
    narrow); memory figures are bytes.

    Example (DataLoader workers for this process: one core left to the training loop):
        >>> info = cpu_info()
        >>> workers = min(8, info.usable_cores - 1)
        >>> 0 <= workers < info.usable_cores <= info.logical_cores, info.memory_total >= info.memory_available
        (True, True)
    """

    model: str
    physical_cores: int | None
    logical_cores: int
    usable_cores: int
    memory_total: int
    memory_available: int


def cpu_info() -> CpuInfo:
    """Read the CPU model, core counts and memory now.

    Example:
        >>> info = cpu_info()
        >>> 1 <= info.usable_cores <= info.logical_cores, 0 < info.memory_available <= info.memory_total
        (True, True)
    """
    memory = psutil.virtual_memory()
    logical = psutil.cpu_count(logical=True) or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else logical
    return CpuInfo(
        model=_cpu_model(),
        physical_cores=psutil.cpu_count(logical=False),
        logical_cores=logical,
        usable_cores=usable,
        memory_total=memory.total,
        memory_available=memory.available,
    )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def allocator() -> str:
    """The C allocator behind torch's CPU tensors in this process, and the setting that matters here.

    A preloaded tcmalloc or jemalloc is named (from this process's memory map); for glibc's malloc,
    whether ``MALLOC_TOP_PAD_`` is set: the `workbench` kernel sets it so the large blocks a step frees are
    kept for the next step instead of being returned to the OS and page-faulted back.
    """
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            mapped = maps.read()
    except OSError:
        mapped = ""
    for library in ("tcmalloc", "jemalloc"):
        if f"lib{library}" in mapped:
            return f"{library} (preloaded)"
    pad = os.environ.get("MALLOC_TOP_PAD_")
    if pad is not None:
        size = f"{int(pad) / 2**20:g} MiB" if pad.isdigit() else repr(pad)
        return f"glibc malloc, MALLOC_TOP_PAD_={size} (the workbench kernel's setting)"
    return (
        "glibc malloc, defaults: a step's large freed blocks go back to the OS; "
        "the workbench kernel sets MALLOC_TOP_PAD_=268435456"
    )
