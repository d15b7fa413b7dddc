"""Generated kernels compile once per machine: a second process starts a generated matmul in ≤ 1 s."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# CUDA's start-up and importing numba are not the kernel's: timed apart (the first H100 run, 2026-11-26,
# timed them together: 10.42 s compiling, 1.25 s from the cache)
FIRST_CALL = """
import sys, time, torch
torch.ones(1, device="cuda"); torch.cuda.synchronize()
started = time.perf_counter()
from workbench.kernels._numba import load_cuda
load_cuda().current_context()
imported = time.perf_counter() - started
from workbench.kernels import matmul
a = torch.randn(300, 200, device="cuda")
started = time.perf_counter()
c = matmul(a, a, transpose_b=True, method=sys.argv[1])
torch.cuda.synchronize()
print(imported, time.perf_counter() - started)
"""


def _first_call_seconds(cache: str, method: str) -> tuple[float, float]:
    """(seconds importing numba.cuda and opening its context, seconds of the first matmul call)."""
    env = {**os.environ, "WORKBENCH_KERNEL_CACHE": cache, "NUMBA_ENABLE_CUDASIM": "0"}
    done = subprocess.run(
        [sys.executable, "-c", FIRST_CALL, method], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported, first_call = done.stdout.strip().splitlines()[-1].split()
    return float(imported), float(first_call)


@pytest.mark.parametrize("method", ["register", "vector"])
def test_a_second_process_loads_the_compiled_matmul_from_disk(tmp_path, method):
    _, compiling = _first_call_seconds(str(tmp_path), method)
    imported, cached = _first_call_seconds(str(tmp_path), method)
    timings = f"first call {compiling:.2f} s compiling, {cached:.2f} s cached (import {imported:.2f} s)"
    assert cached <= 1.0, timings
