import dataclasses

import pytest

from workbench.devices.datasheets import DATASHEETS, GpuDatasheet, find_datasheet

# Names as NVML (nvmlDeviceGetName) and torch.cuda.get_device_name report them.
NVML_NAMES = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 SXM5 80GB", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA A10", "A10"),
    ("Tesla T4", "T4"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2 16GB"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB"),
]


@pytest.mark.parametrize(("gpu_name", "sheet"), NVML_NAMES)
def test_nvml_names_find_their_datasheet(gpu_name, sheet):
    assert find_datasheet(gpu_name) is DATASHEETS[sheet]


@pytest.mark.parametrize("gpu_name", ["nvidia h100 80gb hbm3", "  NVIDIA H100 80GB HBM3  "])
def test_matching_ignores_case_and_surrounding_space(gpu_name):
    assert find_datasheet(gpu_name) is DATASHEETS["H100 SXM"]


@pytest.mark.parametrize(
    "gpu_name",
    [
        "NVIDIA GeForce RTX 4090",
        "NVIDIA H100 NVL",  # other clocks and memory than the SXM part
        "NVIDIA H200 NVL",
        "NVIDIA A10G",  # not an A10 nor an A100
        "NVIDIA L40",  # not an L40S nor an L4
        "NVIDIA A100",  # form factor unknown
        "",
    ],
)
def test_unknown_or_ambiguous_names_find_nothing(gpu_name):
    assert find_datasheet(gpu_name) is None


@pytest.mark.parametrize("sheet", DATASHEETS.values(), ids=list(DATASHEETS))
def test_every_datasheet_is_plausible(sheet):
    assert sheet.fp32_tflops > 0 and sheet.memory_bandwidth_gbs > 0 and sheet.memory_gib > 0
    if sheet.tf32_tflops is not None:
        assert sheet.tf32_tflops >= sheet.fp32_tflops
    if sheet.bf16_tflops is not None:
        assert sheet.bf16_tflops >= (sheet.tf32_tflops or sheet.fp32_tflops)
    assert sheet.pcie.startswith("PCIe ") and sheet.interconnect


def test_figures_that_are_easy_to_get_wrong():
    h100, h200 = DATASHEETS["H100 SXM"], DATASHEETS["H200 SXM"]
    assert (h100.fp32_tflops, h100.tf32_tflops, h100.bf16_tflops) == (67, 494.7, 989.4)  # dense
    assert (h100.memory_gib, h100.memory_bandwidth_gbs) == (80, 3350)
    assert (h200.memory_gib, h200.memory_bandwidth_gbs) == (141, 4800)
    assert h200.bf16_tflops == h100.bf16_tflops
    assert DATASHEETS["L4"].bf16_tflops == 121 and DATASHEETS["A100 SXM 80GB"].tf32_tflops == 156


def test_every_datasheet_is_reachable_from_some_name():
    assert {sheet for _, sheet in NVML_NAMES} == set(DATASHEETS)


def test_datasheet_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DATASHEETS["L4"].fp32_tflops = 1.0  # type: ignore[misc]
    assert isinstance(DATASHEETS["L4"], GpuDatasheet)
