"""The simulator's shared arrays under a slowed-down look-up: numba's own method races, the guarded one holds;
and its emulated warp shuffle.

A look-up that yields to the block's other threads for 1 ms before the caller can store what it found
missing turns a rare race into a near-certain one, so both directions show in a few launches.
"""

import time

import numpy as np
import pytest

from workbench.kernels import matmul, matmul_spec
from workbench.kernels import sum as total_sum
from workbench.kernels._numba import bind_cuda
from workbench.kernels._simulator import GUARD_MARK, guard_shared_arrays

THREADS = 16


class SlowLookup(dict):
    """A block's shared-array table that yields for 1 ms after each look-up."""

    def get(self, key, default=None):
        found = super().get(key, default)
        time.sleep(1e-3)
        return found


@pytest.fixture
def shared_class(on_gpu, monkeypatch):
    """numba's simulated shared memory, with every block's look-ups slowed down."""
    if on_gpu:
        pytest.skip("the simulator's shared arrays: numba runs on a GPU here")
    from numba.cuda.simulator import kernelapi

    init = kernelapi.FakeCUDAShared.__init__

    def slow_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._allocations = SlowLookup()

    monkeypatch.setattr(kernelapi.FakeCUDAShared, "__init__", slow_init)
    return kernelapi.FakeCUDAShared


@pytest.fixture
def shared_sum(shared_class):
    """A kernel in which each of 16 threads writes its slot of a shared array and then sums all 16 (136)."""
    bind_cuda(globals())
    from numba import float32

    @cuda.jit  # noqa: F821 (bound by bind_cuda)
    def kernel(out):
        tile = cuda.shared.array(THREADS, float32)  # noqa: F821
        tile[cuda.threadIdx.x] = cuda.threadIdx.x + 1  # noqa: F821
        cuda.syncthreads()  # noqa: F821
        total = float32(0)
        for i in range(THREADS):
            total += tile[i]
        out[cuda.threadIdx.x] = total  # noqa: F821

    def launches(count: int) -> int:
        """How many of `count` launches left some thread with a wrong sum."""
        wrong = 0
        with np.errstate(all="ignore"):  # a thread summing another thread's unwritten array
            for _ in range(count):
                out = np.zeros(THREADS, np.float32)
                kernel[1, THREADS](out)
                wrong += not np.all(out == THREADS * (THREADS + 1) / 2)
        return wrong

    return launches


def test_guard_is_installed_once(shared_class):
    assert getattr(shared_class.array, GUARD_MARK, False), "load_cuda did not guard the simulator"
    assert guard_shared_arrays() is False


def test_numba_own_method_races_under_the_slowdown(shared_class, shared_sum, monkeypatch):
    """Shows that the checks below can fail. If this fails, numba-cuda has fixed its simulator, and the
    guard (workbench/kernels/_simulator.py) can go."""
    monkeypatch.setattr(shared_class, "array", shared_class.array.__wrapped__)
    assert shared_sum(3) >= 1


def test_guarded_shared_arrays_hold_under_the_slowdown(shared_sum):
    assert shared_sum(3) == 0


@pytest.mark.parametrize("method", ["tiled", "register"])
def test_tiled_matmuls_hold_under_the_slowdown(shared_class, method):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((17, 23)).astype(np.float32)
    b = rng.standard_normal((23, 9)).astype(np.float32)
    launch = {"block": 4, "per_thread": 2} if method == "register" else {"block": 4}
    got = matmul(a, b, method=method, **launch)
    assert np.allclose(got, matmul_spec(a, b), rtol=1e-5, atol=1e-5)


def test_block_reductions_hold_under_the_slowdown(shared_class):
    x = np.arange(1, 200, dtype=np.float32)
    assert float(total_sum(x)) == pytest.approx(float(x.sum()), rel=1e-6)


def test_the_emulated_warp_shuffle_reads_the_lane_delta_above_within_its_warp(on_gpu):
    """64 threads (two warps): lane l gets lane l + delta's value, or its own past its warp, as on a GPU."""
    if on_gpu:
        pytest.skip("the simulator's warp shuffle: numba runs on a GPU here")
    bind_cuda(globals())
    from numba import uint32

    @cuda.jit  # noqa: F821 (bound by bind_cuda)
    def shuffled(out, delta):
        tid = cuda.threadIdx.x  # noqa: F821
        out[tid] = cuda.shfl_down_sync(uint32(0xFFFFFFFF), tid * 10, delta)  # noqa: F821

    for delta in (1, 16):
        out = np.zeros(64, np.int64)
        shuffled[1, 64](out, delta)
        expected = [10 * (t + delta) if (t % 32) + delta < 32 else 10 * t for t in range(64)]
        assert out.tolist() == expected
