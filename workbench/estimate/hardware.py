"""The hardware an estimate runs against: memory, FLOP/s per precision, memory and link bandwidth.

From a GPU datasheet (`hardware_from_datasheet`) or from what `benchmark_hardware` measured on this machine
(`hardware_from_benchmark`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workbench._validate import check_choice
from workbench.devices.datasheets import GpuDatasheet
from workbench.train.choices import PRECISIONS

# PCIe x16 bandwidth per direction, GB/s, by generation (after encoding overhead, rounded).
_PCIE_X16_GBS = {3: 16.0, 4: 32.0, 5: 64.0, 6: 128.0}


@dataclass(frozen=True)
class Hardware:
    """One device of a cluster, as the step-time and fit estimates see it (bytes and FLOP/s).

    Args:
        name: what to call it in tables.
        memory_bytes: device memory.
        fp32_flops, low_precision_flops: matmul FLOP/s in fp32 and in bf16/fp16.
        memory_bandwidth: device memory bandwidth, bytes/s.
        link_bandwidth: bytes/s each device sends to its peers (NVLink, PCIe, or the host's memory).
        gpu: a GPU (whose libraries, cuDNN and cuBLAS, allocate workspaces a CPU run does not).

    Example:
        >>> from workbench.devices.datasheets import DATASHEETS
        >>> h100 = hardware_from_datasheet(DATASHEETS["H100 SXM"])
        >>> h100.flops("bf16") / h100.flops("fp32") > 10, h100.link_bandwidth
        (True, 450000000000.0)
    """

    name: str
    memory_bytes: int
    fp32_flops: float
    low_precision_flops: float
    memory_bandwidth: float
    link_bandwidth: float
    gpu: bool = True

    def flops(self, precision: str) -> float:
        """Matmul FLOP/s at `precision` ("fp32", "bf16", "fp16")."""
        check_choice("precision", precision, PRECISIONS)
        return self.fp32_flops if precision == "fp32" else self.low_precision_flops


def hardware_from_datasheet(sheet: GpuDatasheet) -> Hardware:
    """A GPU from its datasheet; the link is NVLink (half the bidirectional figure) or else PCIe x16."""
    nvlink = re.search(r"NVLink[^:]*:\s*([\d.]+)\s*GB/s", sheet.interconnect)
    if nvlink:
        link = float(nvlink.group(1)) / 2 * 1e9
    else:
        generation = re.search(r"PCIe\s*(\d)", sheet.pcie)
        link = _PCIE_X16_GBS.get(int(generation.group(1)) if generation else 4, 32.0) * 1e9
    low = sheet.bf16_tflops or sheet.fp32_tflops
    return Hardware(
        name=sheet.name,
        memory_bytes=int(sheet.memory_gib * 2**30),
        fp32_flops=sheet.fp32_tflops * 1e12,
        low_precision_flops=low * 1e12,
        memory_bandwidth=sheet.memory_bandwidth_gbs * 1e9,
        link_bandwidth=link,
    )


def hardware_from_benchmark(
    name: str,
    *,
    memory_bytes: int,
    copy_gbs: float,
    matmul_gflops: float,
    low_precision_gflops: float | None = None,
) -> Hardware:
    """This machine's CPU from measured figures (`benchmark_hardware`): gloo ranks on one host talk through
    its memory, so the link bandwidth is the memory copy bandwidth."""
    return Hardware(
        name=name,
        memory_bytes=memory_bytes,
        fp32_flops=matmul_gflops * 1e9,
        low_precision_flops=(low_precision_gflops or matmul_gflops) * 1e9,
        memory_bandwidth=copy_gbs * 1e9,
        link_bandwidth=copy_gbs * 1e9,
        gpu=False,
    )
