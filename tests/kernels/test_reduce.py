"""sum and squared_norm against float64 sums, for lengths around block and grid boundaries, with blocks
under a warp (shared memory only) and of whole warps (the last steps in warp shuffles, emulated on the
simulator)."""

import numpy as np
import pytest
import torch

from workbench.kernels import squared_norm, squared_norm_spec, sum_spec
from workbench.kernels import sum as numba_sum


def _assert_sum_close(got, x, want, rtol=1e-5):
    """fp32 sums are as accurate as Σ|x| allows: compare the error to that scale, not to a cancelled sum."""
    scale = float(np.abs(np.asarray(x, np.float64)).sum())
    assert isinstance(got, float)
    assert abs(got - want) <= rtol * scale, f"{got} vs {want} (scale {scale})"


@pytest.mark.parametrize("n", [1, 1000, 1025])
@pytest.mark.parametrize(
    "launch",
    [
        {},
        {"threads": 4, "blocks": 3},
        {"threads": 1, "blocks": 1},
        {"threads": 32, "blocks": 2},
        {"threads": 256},
    ],
    ids=["default", "4x3", "1x1", "one warp (shuffles only)", "256 (the GPU's: tree, then shuffles)"],
)
def test_sum_and_squared_norm_match_the_spec(rng, n, launch):
    x = rng.standard_normal(n).astype(np.float32)
    _assert_sum_close(numba_sum(x, **launch), x, sum_spec(x))
    _assert_sum_close(squared_norm(x, **launch), x * x, squared_norm_spec(x))


def test_torch_tensors_and_any_shape_read_flat(rng, device):
    x = torch.from_numpy(rng.standard_normal((7, 11)).astype(np.float32)).to(device)
    _assert_sum_close(numba_sum(x), x.cpu().numpy(), float(x.double().sum()))
    _assert_sum_close(squared_norm(x), (x * x).cpu().numpy(), float((x.double() ** 2).sum()))


def test_exact_values():
    assert numba_sum(np.arange(1000, dtype=np.float32)) == 499500.0
    assert squared_norm(np.full(1025, 2, np.float32)) == 4100.0


@pytest.mark.parametrize(
    ("launch", "message"),
    [
        ({"threads": 3}, "threads must be a power of two from 1 to 1024, got 3"),
        ({"threads": 2048}, "threads must be a power of two from 1 to 1024, got 2048"),
        ({"blocks": 0}, "blocks must be an integer ≥ 1, got 0"),
    ],
)
def test_bad_launches_are_named(launch, message):
    with pytest.raises(ValueError, match=message):
        numba_sum(np.ones(4, np.float32), **launch)


def test_empty_input_is_refused():
    with pytest.raises(ValueError, match=r"x is empty \(shape \(0,\)\)"):
        squared_norm(np.ones(0, np.float32))
