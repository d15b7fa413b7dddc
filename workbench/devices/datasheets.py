"""What NVIDIA's datasheets promise for common data-centre GPUs, to set measured numbers against.

Tensor-core figures are **dense**: NVIDIA's tables print TF32/BF16 "with sparsity" (2:4 structured), twice
what an ordinary matmul can reach; the values here are those halved. ``None`` means the GPU has no such
tensor-core mode (T4 and V100 have FP16 tensor cores but no TF32 or BF16).

    >>> find_datasheet("NVIDIA H100 80GB HBM3").name
    'H100 SXM'
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuDatasheet:
    """Vendor figures for one GPU model.

    ``memory_gib`` is the capacity as the datasheet prints it ("80 GB"; NVML reports slightly less),
    bandwidths are GB/s (10^9 bytes), compute is TFLOPS (10^12 FLOP/s), dense.

    Example (a measured figure against the sheet, say 3.0 TB/s of copy bandwidth on an H100 SXM):
        >>> sheet = DATASHEETS["H100 SXM"]
        >>> sheet.memory_bandwidth_gbs, f"{3000 / sheet.memory_bandwidth_gbs:.0%} of the datasheet's"
        (3350, "90% of the datasheet's")
        >>> round(sheet.tf32_tflops / sheet.fp32_tflops, 1)  # what TF32 tensor cores promise over FP32
        7.4
    """

    name: str
    memory_gib: float
    memory_bandwidth_gbs: float
    fp32_tflops: float
    tf32_tflops: float | None
    bf16_tflops: float | None
    interconnect: str
    pcie: str


# Sources: NVIDIA datasheets / product briefs — A100 (nvidia-a100-datasheet-us-nvidia-1758950-r4-web),
# H100 (h100-datasheet, "* with sparsity", PB-11133-001 for the PCIe card), H200 (h200-datasheet),
# L4, L40S, A10, T4 and V100 datasheets. Sparse figures halved for TF32/BF16.
DATASHEETS: dict[str, GpuDatasheet] = {
    sheet.name: sheet
    for sheet in (
        GpuDatasheet("A100 SXM 40GB", 40, 1555, 19.5, 156, 312, "NVLink 3: 600 GB/s", "PCIe 4.0 x16"),
        GpuDatasheet("A100 SXM 80GB", 80, 2039, 19.5, 156, 312, "NVLink 3: 600 GB/s", "PCIe 4.0 x16"),
        GpuDatasheet(
            "A100 PCIe 40GB", 40, 1555, 19.5, 156, 312, "NVLink bridge (2 GPUs): 600 GB/s", "PCIe 4.0 x16"
        ),
        GpuDatasheet(
            "A100 PCIe 80GB", 80, 1935, 19.5, 156, 312, "NVLink bridge (2 GPUs): 600 GB/s", "PCIe 4.0 x16"
        ),
        # Dense TF32 494.7 / BF16 989.4 = the datasheet's 989 / 1,979 "with sparsity" halved.
        GpuDatasheet("H100 SXM", 80, 3350, 67, 494.7, 989.4, "NVLink 4: 900 GB/s", "PCIe 5.0 x16"),
        # PCIe card: HBM2e "2,000 GB/s", 756 / 1,513 TFLOPS with sparsity.
        GpuDatasheet(
            "H100 PCIe", 80, 2000, 51, 378, 756.5, "NVLink bridge (2 GPUs): 600 GB/s", "PCIe 5.0 x16"
        ),
        # H200 SXM: H100 SXM compute, 141 GB HBM3e at 4.8 TB/s.
        GpuDatasheet("H200 SXM", 141, 4800, 67, 494.7, 989.4, "NVLink 4: 900 GB/s", "PCIe 5.0 x16"),
        GpuDatasheet("L4", 24, 300, 30.3, 60, 121, "none", "PCIe 4.0 x16"),
        # L40S: 183 / 366* TF32, 362.05 / 733* BF16 as printed in its datasheet.
        GpuDatasheet("L40S", 48, 864, 91.6, 183, 362.05, "none", "PCIe 4.0 x16"),
        GpuDatasheet("A10", 24, 600, 31.2, 62.5, 125, "none", "PCIe 4.0 x16"),
        # T4 datasheet: "320+ GB/s"; 65 TFLOPS FP16 tensor, no TF32/BF16.
        GpuDatasheet("T4", 16, 320, 8.1, None, None, "none", "PCIe 3.0 x16"),
        # V100 SXM2: 125 TFLOPS FP16 tensor, no TF32/BF16.
        GpuDatasheet("V100 SXM2 16GB", 16, 900, 15.7, None, None, "NVLink 2: 300 GB/s", "PCIe 3.0 x16"),
        GpuDatasheet("V100 SXM2 32GB", 32, 900, 15.7, None, None, "NVLink 2: 300 GB/s", "PCIe 3.0 x16"),
    )
}


@dataclass(frozen=True)
class _Rule:
    """A name matches when it has every token in ``all_of`` and none in ``none_of``."""

    sheet: str
    all_of: frozenset[str]
    none_of: frozenset[str] = frozenset()


def _rule(sheet: str, all_of: str, none_of: str = "") -> _Rule:
    return _Rule(sheet, frozenset(all_of.split()), frozenset(none_of.split()))


# NVML names, tokenised (upper case, split on spaces, "-" and "_"); tried in order, most specific first.
# Whole tokens, so "A10" never matches "A100" or "A10G", nor "L4" "L40S". NVL and other variants whose
# figures differ (H100 NVL, H200 NVL, A10G, L40) match no rule: no datasheet is better than a wrong one.
_RULES: tuple[_Rule, ...] = (
    _rule("H200 SXM", "H200", "NVL PCIE"),  # "NVIDIA H200"
    _rule("H100 PCIe", "H100 PCIE"),  # "NVIDIA H100 PCIe"
    _rule("H100 SXM", "H100 HBM3", "NVL PCIE"),  # "NVIDIA H100 80GB HBM3"
    _rule("H100 SXM", "H100 SXM5", "NVL PCIE"),  # "NVIDIA H100 SXM5 80GB"
    _rule("A100 SXM 80GB", "A100 SXM4 80GB"),  # "NVIDIA A100-SXM4-80GB"
    _rule("A100 SXM 40GB", "A100 SXM4 40GB"),  # "NVIDIA A100-SXM4-40GB"
    _rule("A100 PCIe 80GB", "A100 PCIE 80GB"),  # "NVIDIA A100 80GB PCIe"
    _rule("A100 PCIe 40GB", "A100 PCIE 40GB"),  # "NVIDIA A100-PCIE-40GB"
    _rule("V100 SXM2 32GB", "V100 SXM2 32GB"),  # "Tesla V100-SXM2-32GB"
    _rule("V100 SXM2 16GB", "V100 SXM2 16GB"),  # "Tesla V100-SXM2-16GB"
    _rule("L40S", "L40S"),  # "NVIDIA L40S"
    _rule("L4", "L4"),  # "NVIDIA L4"
    _rule("A10", "A10"),  # "NVIDIA A10"
    _rule("T4", "T4"),  # "Tesla T4"
)


def find_datasheet(gpu_name: str) -> GpuDatasheet | None:
    """The datasheet for a GPU named as NVML or torch name it, or None for a model not in the table.

    Args:
        gpu_name: e.g. ``"NVIDIA H100 80GB HBM3"``, ``"NVIDIA A100-SXM4-80GB"``, ``"Tesla T4"``.

    >>> find_datasheet("NVIDIA A100-SXM4-80GB").name
    'A100 SXM 80GB'
    >>> find_datasheet("NVIDIA GeForce RTX 4090") is None
    True
    """
    tokens = set(re.split(r"[\s\-_]+", gpu_name.strip().upper()))
    for rule in _RULES:
        if rule.all_of <= tokens and not rule.none_of & tokens:
            return DATASHEETS[rule.sheet]
    return None
