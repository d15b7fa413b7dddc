"""Offline datasets, deterministic splits and rank-aware loaders; the character text of ``"text"``.

>>> from workbench.data import load_dataset, split_dataset, split_loaders
>>> splits = split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0)
>>> loaders = split_loaders(splits, batch_size=64, rank=0, world_size=2)
"""

from workbench.data.datasets import DATASETS, Dataset, load_dataset
from workbench.data.loaders import (
    REMAINDER_POLICIES,
    ShardedLoader,
    SplitLoaders,
    shard_indices,
    shard_size,
    split_loaders,
)
from workbench.data.splits import Splits, split_dataset, split_indices
from workbench.data.text import decode, encode, generate_text

__all__ = [
    "DATASETS",
    "REMAINDER_POLICIES",
    "Dataset",
    "ShardedLoader",
    "SplitLoaders",
    "Splits",
    "decode",
    "encode",
    "generate_text",
    "load_dataset",
    "shard_indices",
    "shard_size",
    "split_dataset",
    "split_indices",
    "split_loaders",
]
