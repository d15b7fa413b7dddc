"""`Stream`: training data as a streaming dataset gives it, an IterableDataset without ``__len__``."""

from __future__ import annotations

import itertools

import torch
from torch.utils.data import IterableDataset


class Stream(IterableDataset):
    """`count` samples (None: without an end) of `features` normal inputs each, the same ones on every pass,
    and a target: the first input's sign as a class, or with `regression` the inputs' sum."""

    def __init__(
        self, features: int = 6, *, regression: bool = False, count: int | None = None, seed: int = 1
    ):
        self.features, self.regression, self.count, self.seed = features, regression, count, seed

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed)
        for _ in itertools.repeat(None) if self.count is None else range(self.count):
            x = torch.randn(self.features, generator=generator)
            yield x, (x.sum(dim=0, keepdim=True) if self.regression else int(x[0] > 0))
