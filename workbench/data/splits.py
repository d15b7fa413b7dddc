"""Deterministic train/val/test splits by seed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from workbench.data.datasets import Dataset

SPLIT_NAMES = ("train", "val", "test")


@dataclass(frozen=True)
class Splits:
    """The three disjoint parts of a dataset."""

    train: Dataset
    val: Dataset
    test: Dataset

    def sizes(self) -> dict[str, int]:
        """Number of samples in each split, e.g. ``{'train': 1437, 'val': 180, 'test': 180}``."""
        return {name: len(getattr(self, name)) for name in SPLIT_NAMES}


def split_indices(
    n: int, fractions: Sequence[float] = (0.8, 0.1, 0.1), *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Disjoint index tensors (train, val, test) of a random permutation of ``range(n)``.

    Each part gets ``floor(fraction·n)`` samples; when the fractions sum to 1 the few samples left by
    rounding go to train, when they sum to less the rest is left out (a quick way to subsample).
    """
    fractions = _checked_fractions(fractions)
    order = torch.from_numpy(np.random.default_rng(seed).permutation(n).astype(np.int64))
    n_val, n_test = (int(f * n) for f in fractions[1:])
    n_train = n - n_val - n_test if abs(sum(fractions) - 1.0) < 1e-9 else int(fractions[0] * n)
    return (
        order[:n_train],
        order[n_train : n_train + n_val],
        order[n_train + n_val : n_train + n_val + n_test],
    )


def split_dataset(dataset: Dataset, fractions: Sequence[float] = (0.8, 0.1, 0.1), *, seed: int = 0) -> Splits:
    """Split ``dataset`` into train/val/test by ``fractions``; the same seed gives the same split.

    Args:
        dataset: what to split.
        fractions: (train, val, test), each ≥ 0, summing to at most 1.
        seed: seed of the shuffling.

    Example:
        >>> from workbench.data import load_dataset
        >>> split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0).sizes()
        {'train': 1439, 'val': 179, 'test': 179}
    """
    train, val, test = split_indices(len(dataset), fractions, seed=seed)
    return Splits(dataset.subset(train), dataset.subset(val), dataset.subset(test))


def _checked_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    allowed = "a sequence of 3 numbers (train, val, test), each ≥ 0, summing to at most 1"
    try:
        values = tuple(float(f) for f in fractions)
    except (TypeError, ValueError):
        raise ValueError(f"fractions must be {allowed}; got {fractions!r}") from None
    if len(values) != 3 or any(not f >= 0 for f in values) or sum(values) > 1 + 1e-9:
        raise ValueError(f"fractions must be {allowed}; got {fractions!r}")
    return values
