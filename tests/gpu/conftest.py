"""GPU tests: what a user does on a CUDA GPU, each in seconds. Every test here is marked ``gpu``; without a
CUDA GPU they skip with the reason (tests/conftest.py), and `workbench gpu-check` runs them on one.

numba is configured for the GPU here, before a test imports ``numba.cuda`` (the simulator when there is
no driver, but then nothing here runs).
"""

from __future__ import annotations

import sys

import pytest
import torch

from workbench.devices import configure_numba

if "numba.cuda" not in sys.modules:
    configure_numba()


@pytest.fixture
def cuda() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())
