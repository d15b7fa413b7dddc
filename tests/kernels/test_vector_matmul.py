"""The vectorized matmul (`workbench.kernels.vector_tile`) on the simulator: its own kernel on ragged tiles
and a K that ends inside a slab, the register kernel where 128-bit accesses cannot go, and the simulator's
128-bit accesses refusing what would fault on a GPU."""

import numpy as np
import pytest

from workbench.kernels import gemm, matmul, matmul_spec
from workbench.kernels._simulator import aligned_empty
from workbench.kernels.vector_access import simulated_load4, simulated_store4
from workbench.kernels.vector_tile import vector_ready, vector_source

FORMS = [(False, False), (True, False), (False, True), (True, True)]


def _operands(rng, m, k, n, transpose_a, transpose_b):
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    return a, b


@pytest.fixture
def no_fallback(monkeypatch):
    """The register kernel, which `matmul(method="vector")` falls back to, made to fail if asked for."""

    def refuse(*args):
        raise AssertionError(f"fell back to the register kernel {args}")

    monkeypatch.setattr(gemm, "register_kernel", refuse)


@pytest.mark.parametrize(("transpose_a", "transpose_b"), FORMS)
@pytest.mark.parametrize(("m", "k", "n", "block"), [(20, 12, 36, 2), (36, 28, 20, 4), (4, 4, 8, 2)])
def test_the_vector_kernel_matches_the_spec(
    rng, assert_close, no_fallback, transpose_a, transpose_b, m, k, n, block
):
    """Tiles of 8·block: rows and columns past the matrix in edge tiles, K % 8 == 4 (a slab half past K),
    K smaller than a slab."""
    a, b = _operands(rng, m, k, n, transpose_a, transpose_b)
    got = matmul(a, b, method="vector", transpose_a=transpose_a, transpose_b=transpose_b, block=block)
    assert got.shape == (m, n) and got.dtype == np.float32
    assert_close(got, matmul_spec(a, b, transpose_a=transpose_a, transpose_b=transpose_b))


def test_more_column_tiles_than_grid_y_holds(rng, assert_close, no_fallback, monkeypatch):
    monkeypatch.setattr(gemm, "MAX_GRID_Y", 1)
    a, b = _operands(rng, 12, 8, 52, False, False)
    assert_close(matmul(a, b, method="vector", block=2), matmul_spec(a, b))


def test_sizes_or_addresses_it_cannot_take_run_the_register_kernel(rng, assert_close, monkeypatch):
    asked = []
    register_kernel = gemm.register_kernel
    monkeypatch.setattr(gemm, "register_kernel", lambda *args: asked.append(args) or register_kernel(*args))
    a, b = _operands(rng, 17, 23, 9, False, False)  # sizes not multiples of 4
    assert_close(matmul(a, b, method="vector", block=2), matmul_spec(a, b))
    storage = aligned_empty(1 + 12 * 8, np.float32, 16)
    shifted = storage[1:].reshape(12, 8)  # 4 bytes past a 16-byte boundary
    shifted[:] = rng.standard_normal((12, 8))
    b = rng.standard_normal((8, 16)).astype(np.float32)
    assert not vector_ready(12, 16, 8, (shifted.ctypes.data, b.ctypes.data, 0))
    assert_close(matmul(shifted, b, method="vector", block=2), matmul_spec(shifted, b))
    assert asked == [(False, False, 2, 8), (False, False, 2, 8)]


def test_the_loop_over_k_holds_no_bounds_work():
    """Everything between the slab's barrier and the next is loads, the next slab's prefetch and FMAs."""
    source = vector_source(True, False, 4)
    loop = source.split("cuda.syncthreads()")[1]
    assert "min(" not in loop and "< m" not in loop and "< n" not in loop
    assert loop.count("load4(a_s") == loop.count("load4(b_s") == 16


def test_the_simulators_vector_accesses_refuse_what_a_gpu_would_fault_on():
    data = np.zeros(16, np.float32)
    with pytest.raises(IndexError, match=r"load4/store4 at 2: needs a multiple of 4 in 0\.\.12"):
        simulated_load4(data, 2)
    with pytest.raises(IndexError, match="at 16"):
        simulated_store4(data, 16, 1, 2, 3, 4)
    with pytest.raises(ValueError, match="aligned to 16 bytes"):
        simulated_load4(aligned_empty(17, np.float32, 16)[1:], 0)
