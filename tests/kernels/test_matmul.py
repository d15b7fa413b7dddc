"""The four matmul kernels against the float64 spec on odd shapes, in every transposed form."""

import numpy as np
import pytest
import torch

from workbench.kernels import matmul, matmul_spec

# Small launches so that 17×23 @ 23×9 spans several blocks with ragged edges on the simulator.
LAUNCHES = {
    "naive": {"block": 4},
    "tiled": {"block": 4},
    "register": {"block": 2, "per_thread": 2},
    "vector": {"block": 2},
}


def _operands(rng, m, k, n, transpose_a, transpose_b):
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    return a, b


@pytest.mark.parametrize("method", ["naive", "tiled", "register", "vector"])
@pytest.mark.parametrize(
    ("transpose_a", "transpose_b"), [(False, False), (True, False), (False, True), (True, True)]
)
def test_odd_shapes_match_the_spec(rng, assert_close, method, transpose_a, transpose_b):
    a, b = _operands(rng, 17, 23, 9, transpose_a, transpose_b)
    got = matmul(a, b, method=method, transpose_a=transpose_a, transpose_b=transpose_b, **LAUNCHES[method])
    assert got.shape == (17, 9) and got.dtype == np.float32
    assert_close(got, matmul_spec(a, b, transpose_a=transpose_a, transpose_b=transpose_b))


@pytest.mark.parametrize("method", ["naive", "tiled", "register", "vector"])
def test_default_launch_and_torch_tensors(rng, assert_close, device, method):
    a, b = _operands(rng, 5, 7, 3, False, True)
    ta, tb = torch.from_numpy(a).to(device), torch.from_numpy(b).to(device)
    got = matmul(ta, tb, method=method, transpose_b=True)
    assert isinstance(got, torch.Tensor) and got.device == ta.device and got.dtype == torch.float32
    assert_close(got, (ta.double() @ tb.double().T))


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (1, 5, 1), (3, 1, 2)])
def test_degenerate_shapes(rng, assert_close, m, k, n):
    a, b = _operands(rng, m, k, n, False, False)
    assert_close(matmul(a, b), matmul_spec(a, b))


def test_mismatched_inner_dimensions_name_both_shapes():
    a, b = np.ones((3, 4), np.float32), np.ones((5, 2), np.float32)
    with pytest.raises(ValueError, match=r"a is 3×4 \(a.shape \(3, 4\)\), b is 5×2 \(b.shape \(5, 2\)\)"):
        matmul(a, b)
    with pytest.raises(ValueError, match="aᵀ is 4×3"):
        matmul(a, b, transpose_a=True)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"method": "strassen"},
            "method='strassen' is not supported; allowed values: 'register', 'vector', 'tiled'",
        ),
        ({"block": 0}, "block must be an integer from 1 to 32"),
        ({"block": 33}, "block must be an integer from 1 to 32"),
        ({"method": "tiled", "per_thread": 2}, "per_thread applies to method='register' only"),
        ({"per_thread": 0}, "per_thread must be an integer ≥ 1"),
        ({"per_thread": 9}, "per_thread must be at most 8"),
        ({"block": 32, "per_thread": 8}, "block=32 gives 1024 threads"),
        ({"block": 6, "per_thread": 2}, "tiles by powers of two: .* got block=6, per_thread=2"),
        ({"block": 16, "per_thread": 1}, "block=16 with per_thread=1 leaves some .* use per_thread ≥ 2"),
        (
            {"method": "vector", "per_thread": 4},
            "method='vector' computes 8×8 outputs per thread; pass no per_",
        ),
        ({"method": "vector", "block": 3}, "method='vector' takes block in 2, 4, 8, 16, got 3"),
    ],
)
def test_bad_launch_options_are_named(options, message):
    a = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match=message):
        matmul(a, a, **options)


def test_operands_must_be_float32_matrices():
    a = np.ones((2, 2), np.float32)
    with pytest.raises(
        TypeError, match=r"b has dtype float64; allowed dtypes: float32; pass b.astype\(np.float32\)$"
    ):
        matmul(a, np.ones((2, 2)))
    with pytest.raises(TypeError, match=r"a has dtype float64; .*; pass a.to\(torch.float32\)$"):
        matmul(torch.ones(2, 2, dtype=torch.float64), torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"a must be 2-D, got shape \(4,\)"):
        matmul(np.ones(4, np.float32), a)


@pytest.mark.parametrize("method", ["naive", "tiled", "register", "vector"])
def test_more_column_tiles_than_grid_y_holds(rng, assert_close, monkeypatch, method):
    """Grid y is capped (65,535 blocks on a GPU); here at 1, so one block column walks every column tile."""
    from workbench.kernels import gemm

    monkeypatch.setattr(gemm, "MAX_GRID_Y", 1)
    a, b = _operands(rng, 9, 7, 23, False, False)
    assert_close(matmul(a, b, method=method, **LAUNCHES[method]), matmul_spec(a, b))


def test_any_shape_fits_the_grid_limits():
    from workbench.kernels.gemm import grid_2d

    for rows, cols in ((1, 1), (1_048_561, 16), (2**31, 2**31), (17, 10**9)):
        x, y = grid_2d(rows, cols, 16)
        assert 1 <= x <= 2**31 - 1 and 1 <= y <= 65_535  # CUDA's limits for grid x and grid y


def test_register_blocks_beyond_256_threads_are_refused():
    a = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match=r"block=32 gives 1024 threads.* use block ≤ 16"):
        matmul(a, a, method="register", block=32, per_thread=1)


def test_a_generated_kernel_is_written_once_and_imported_from_its_file(tmp_path, monkeypatch):
    """The file numba's disk cache is keyed on keeps its time stamp when a later process asks again."""
    from workbench.kernels import register_tile

    monkeypatch.setenv(register_tile.CACHE_VARIABLE, str(tmp_path))
    source = register_tile._HEADER + register_tile.register_source(False, True, 2, 2)
    first = register_tile.source_module(source, "register_matmul")
    (path,) = tmp_path.glob("register_matmul_*.py")
    stamp = path.stat().st_mtime_ns
    second = register_tile.source_module(source, "register_matmul")
    assert path.stat().st_mtime_ns == stamp and path.read_text() == source
    assert callable(first.register) and callable(second.register)
    assert register_tile.kernel_cache_folder() == tmp_path
