"""Headless device monitoring: a sampler thread reading CPU (psutil) and GPUs (NVML when present).

A sample is a plain dict::

    {"time": 1732230000.0,                      # unix seconds
     "cpu": {"percent": 37.5, "per_core": [40.0, 35.0], "ram_used": 3.1e9, "ram_total": 8.3e9},
     "gpus": [{"index": 0, "name": "NVIDIA H100", "utilization": 97.0, "memory_used": …, "memory_total": …,
               "power_w": 412.3, "temperature_c": 61.0,
               "pcie_tx_bytes_per_s": …, "pcie_rx_bytes_per_s": …}]},  # [] without NVML
     "processes": [{"rank": 0, "pid": 4242, "cpu_cores": 0.98, "rss": 1.2e9,   # only when watching ranks
                    "gpu_index": 0, "gpu_memory": 3.4e9}]}                    # gpu_*: where NVML says

Values a GPU does not report are None. Importing this package starts nothing and does not load NVML.
"""

from workbench.monitor.readers import NvmlReader, ProcessReader, read_cpu
from workbench.monitor.sampler import DeviceSampler

__all__ = ["DeviceSampler", "NvmlReader", "ProcessReader", "read_cpu"]
