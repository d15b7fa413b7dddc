"""Small, fast data for the trainer tests."""

from __future__ import annotations

import pytest

from workbench.data import load_dataset, split_dataset


@pytest.fixture(scope="session")
def digits_splits():
    return split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0)


@pytest.fixture(scope="session")
def regression_splits():
    return split_dataset(load_dataset("regression", n_samples=600, noise=0.1), (0.8, 0.1, 0.1), seed=0)
