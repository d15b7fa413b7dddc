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
    """

    model: str
    physical_cores: int | None
    logical_cores: int
    usable_cores: int
    memory_total: int
    memory_available: int


def cpu_info() -> CpuInfo:
    """Read the CPU model, core counts and memory now."""
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
