import subprocess
import sys

from workbench.monitor import NvmlReader, read_cpu

BUSY_GPUS = [
    {"name": "NVIDIA H100 80GB HBM3", "memory": 80 << 30, "capability": (9, 0), "used": 10 << 30, "util": 97,
     "power_mw": 412_300, "temp": 61, "pcie_kb": (1000, 2000)},
    {"name": b"NVIDIA L4", "memory": 24 << 30, "capability": (8, 9)},
]  # fmt: skip


def test_cpu_reading_has_per_core_and_ram():
    reading = read_cpu()
    assert len(reading["per_core"]) >= 1 and 0 <= reading["percent"] <= 100
    assert isinstance(reading["percent"], float) and all(isinstance(c, float) for c in reading["per_core"])
    assert isinstance(reading["ram_used"], int) and isinstance(reading["ram_total"], int)
    assert 0 < reading["ram_used"] <= reading["ram_total"]


def test_nvml_reader_reads_every_gpu_with_units_converted(fake_nvml):
    nvml = fake_nvml(BUSY_GPUS)
    reader = NvmlReader(nvml)
    assert not nvml.open  # nothing happens before the first read
    first, second = reader.read()
    assert first == {
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "utilization": 97.0, "memory_used": 10 << 30,
        "memory_total": 80 << 30, "power_w": 412.3, "temperature_c": 61.0,
        "pcie_tx_bytes_per_s": 1000 * 1024.0, "pcie_rx_bytes_per_s": 2000 * 1024.0,
    }  # fmt: skip
    assert (
        second["name"] == "NVIDIA L4" and second["power_w"] is None and second["pcie_tx_bytes_per_s"] is None
    )
    reader.close()
    assert not nvml.open and nvml.shutdowns == 1


def test_without_nvml_there_are_no_gpus_and_a_reason(fake_nvml):
    reader = NvmlReader(fake_nvml(init_error="NVML Shared Library Not Found"))
    assert reader.read() == []
    assert "NVML Shared Library Not Found" in reader.unavailable_reason


def test_the_reason_outlives_close_and_a_reopen_tries_again(fake_nvml):
    nvml = fake_nvml([BUSY_GPUS[1]], init_error="Driver Not Loaded")
    reader = NvmlReader(nvml)
    assert reader.read() == [] and reader.read() == []
    reader.close()
    assert "Driver Not Loaded" in reader.unavailable_reason  # still there for a report after stop()
    nvml.init_error = None  # the driver came back
    assert [gpu["name"] for gpu in reader.read()] == ["NVIDIA L4"] and reader.unavailable_reason is None
    reader.close()
    assert not nvml.open


def test_the_real_pynvml_on_this_machine_degrades_or_reads():
    with NvmlReader() as reader:
        gpus = reader.read()
        assert (gpus == [] and reader.unavailable_reason) or all("utilization" in g for g in gpus)


def test_import_loads_no_nvml_and_starts_no_thread():
    code = (
        "import sys, threading; before = threading.active_count(); import workbench.monitor; "
        "print('pynvml' in sys.modules, threading.active_count() - before)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["False", "0"]
