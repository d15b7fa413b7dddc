"""Kernel tests run on numba's CPU simulator without a GPU and on the GPU with one: tensors go where numba is.

numba is configured here, before any test imports ``numba.cuda``. Shapes are tiny and odd, and launches
small (the simulator runs every CUDA thread as a Python thread).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from workbench.devices import configure_numba
from workbench.kernels._numba import on_simulator, torch_device  # import no numba until called

if "numba.cuda" not in sys.modules:
    configure_numba()

ON_GPU = not on_simulator()


@pytest.fixture(scope="session")
def on_gpu() -> bool:
    """True when numba runs on a CUDA GPU, False on its simulator."""
    return ON_GPU


@pytest.fixture(scope="session")
def device() -> torch.device:
    """Where torch tensors must live for numba: cuda on a GPU, cpu on the simulator."""
    return torch_device()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _as_numpy(x: object) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, np.float64)


def _relative_error(got: object, want: object) -> float:
    got, want = _as_numpy(got), _as_numpy(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    scale = max(float(np.abs(want).max(initial=0.0)), 1e-30)
    return float(np.abs(got - want).max(initial=0.0)) / scale


@pytest.fixture(scope="session")
def assert_close():
    """assert_close(got, want, rtol=1e-5): max |got - want| ≤ rtol · max |want| (shapes must match)."""

    def check(got: object, want: object, rtol: float = 1e-5) -> None:
        error = _relative_error(got, want)
        assert error <= rtol, f"relative error {error:.3g} > {rtol:g}"

    return check
