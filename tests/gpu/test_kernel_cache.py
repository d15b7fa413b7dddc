"""Generated kernels compile once per machine: a second process starts the register matmul in ≤ 1 s."""

from __future__ import annotations

import os
import subprocess
import sys

FIRST_CALL = """
import time, torch
torch.ones(1, device="cuda"); torch.cuda.synchronize()  # CUDA's start-up is not the kernel's
from workbench.kernels import matmul
a = torch.randn(300, 200, device="cuda")
started = time.perf_counter()
c = matmul(a, a, transpose_b=True)
torch.cuda.synchronize()
print(time.perf_counter() - started)
"""


def _first_call_seconds(cache: str) -> float:
    env = {**os.environ, "WORKBENCH_KERNEL_CACHE": cache, "NUMBA_ENABLE_CUDASIM": "0"}
    done = subprocess.run(
        [sys.executable, "-c", FIRST_CALL], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_the_compiled_register_matmul_from_disk(tmp_path):
    compiling = _first_call_seconds(str(tmp_path))
    cached = _first_call_seconds(str(tmp_path))
    print(f"first process {compiling:.2f} s, second {cached:.2f} s")
    assert cached <= 1.0, f"second process took {cached:.2f} s (first {compiling:.2f} s)"
