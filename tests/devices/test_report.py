import dataclasses
import json

from workbench.devices import device_report

H100 = {"name": "NVIDIA H100 80GB HBM3", "memory": 80 * 2**30, "capability": (9, 0), "pcie": (5, 16, 5, 16)}


def test_report_with_nvml_lists_each_gpu(fake_nvml):
    report = device_report(nvml=fake_nvml([H100, H100]))
    text = str(report)
    assert len(report.gpus) == 2
    for expected in (
        "gpu 0",
        "gpu 1",
        "NVIDIA H100 80GB HBM3",
        "80.0 GiB",
        "gen 5 x16 (max gen 5 x16)",
        "550.54.15 (CUDA 12.4)",
        "compute capability  9.0",
    ):
        assert expected in text, expected


def test_report_without_nvml_says_why_and_shows_zero_gpus(fake_nvml):
    report = device_report(nvml=fake_nvml(init_error="NVML Shared Library Not Found"))
    rows = {(item, value) for _, item, value in report.rows()}
    assert ("gpus", "0") in rows
    assert any(item == "status" and "NVML Shared Library Not Found" in value for item, value in rows)
    assert not any(section.startswith("gpu ") for section, _, _ in report.rows())


def test_report_covers_cpu_torch_and_numba():
    report = device_report()
    items = [item for _, item, _ in report.rows()]
    for item in ("python", "torch", "numba", "model", "cores", "memory", "driver library", "numba backend"):
        assert item in items, item
    assert report.cpu.logical_cores >= 1 and report.cpu.memory_total > 0


def test_report_renders_as_html_and_json(fake_nvml):
    report = device_report(nvml=fake_nvml([H100]))
    html = report._repr_html_()
    assert html.startswith("<table>") and "NVIDIA H100 80GB HBM3" in html
    assert json.loads(json.dumps(dataclasses.asdict(report), default=str))["nvml"]["gpus"][0]["index"] == 0


def test_html_is_escaped(fake_nvml):
    report = device_report(nvml=fake_nvml([{**H100, "name": "<script>"}]))
    assert "<script>" not in report._repr_html_() and "&lt;script&gt;" in report._repr_html_()


def test_the_report_says_which_allocator_runs_and_whether_malloc_is_padded(monkeypatch):
    from workbench.devices.cpu import allocator

    monkeypatch.delenv("MALLOC_TOP_PAD_", raising=False)
    unpadded = allocator()
    monkeypatch.setenv("MALLOC_TOP_PAD_", "268435456")
    padded = allocator()
    if "preloaded" in unpadded:  # tcmalloc or jemalloc in this process: the variable does not matter
        assert padded == unpadded
    else:
        assert "defaults" in unpadded and "MALLOC_TOP_PAD_=268435456" in unpadded  # names the fix
        assert padded == "glibc malloc, MALLOC_TOP_PAD_=256 MiB (the workbench kernel's setting)"
    assert [value for _, item, value in device_report().rows() if item == "allocator"] == [padded]


def test_report_gives_the_version_workbench_is_installed_under():
    from importlib.metadata import version

    report = device_report()
    assert report.packages["workbench"] == version("gpu-training-workbench")  # not the index's `workbench`
    assert ("workbench", version("gpu-training-workbench")) in [
        (item, value) for _, item, value in report.rows()
    ]
