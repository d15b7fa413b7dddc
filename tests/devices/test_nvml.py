import sys

from workbench.devices import nvml_report

H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "memory": 80 * 2**30,
    "capability": (9, 0),
    "pcie": (5, 16, 5, 16),
    "nvlinks": [1, 1, 1, 0],
}
L4 = {"name": b"NVIDIA L4", "memory": 24 * 2**30, "capability": (8, 9), "pcie": (4, 8, 4, 16)}


def test_gpus_are_read_with_their_links(fake_nvml):
    nvml = fake_nvml([H100, L4])
    report = nvml_report(nvml)
    assert report.available and report.error is None
    assert (report.driver_version, report.cuda_driver_version) == ("550.54.15", "12.4")
    h100, l4 = report.gpus
    assert (h100.index, h100.name, h100.memory_total, h100.compute_capability) == (
        0,
        H100["name"],
        80 * 2**30,
        (9, 0),
    )
    assert (h100.pcie_generation, h100.pcie_width) == (5, 16)
    assert h100.nvlinks_active == 3
    assert l4.name == "NVIDIA L4"  # bytes from older bindings are decoded
    assert l4.nvlinks_active is None  # no NVLink: not reported, not zero
    assert (l4.pcie_width, l4.pcie_max_width) == (8, 16)


def test_nvml_is_shut_down_after_each_call(fake_nvml):
    nvml = fake_nvml([H100])
    nvml_report(nvml)
    nvml_report(nvml)
    assert not nvml.open and nvml.shutdowns == 2


def test_missing_fields_are_none_not_errors(fake_nvml):
    bare = {"name": "Mystery GPU", "memory": 2**30, "capability": None}
    (gpu,) = nvml_report(fake_nvml([bare])).gpus
    assert gpu.pcie_generation is None and gpu.nvlinks_active is None


def test_no_nvml_library_means_zero_gpus_and_a_reason(fake_nvml):
    report = nvml_report(fake_nvml(init_error="NVML Shared Library Not Found"))
    assert report.gpus == () and not report.available
    assert "NVML Shared Library Not Found" in report.error


def test_nvml_binding_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    report = nvml_report()
    assert report.gpus == () and report.error == "nvidia-ml-py is not installed"


def test_the_real_binding_answers_either_way():
    report = nvml_report()
    assert report.available == (report.error is None)
    assert report.available or report.gpus == ()
