"""Offline datasets, deterministic splits and rank-aware loaders; the character text of ``"text"``.

>>> from workbench.data import load_dataset, split_dataset, split_loaders
>>> splits = split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0)
>>> loaders = split_loaders(splits, batch_size=64, rank=0, world_size=2)
"""

from workbench.data.batch import batch_size_of, describe_batch, move_batch
from workbench.data.datasets import DATASETS, Dataset, load_dataset
from workbench.data.loaders import (
    REMAINDER_POLICIES,
    ShardedLoader,
    SplitLoaders,
    shard_indices,
    shard_size,
    split_loaders,
)
from workbench.data.splits import Splits, as_splits, split_dataset, split_indices, split_size
from workbench.data.text import decode, encode, generate_text
from workbench.data.torch_loaders import (
    LoaderConfig,
    ShardedIterable,
    ShardSampler,
    TorchLoader,
    torch_loader,
)

__all__ = [
    "DATASETS",
    "REMAINDER_POLICIES",
    "Dataset",
    "LoaderConfig",
    "ShardSampler",
    "ShardedIterable",
    "ShardedLoader",
    "SplitLoaders",
    "Splits",
    "TorchLoader",
    "as_splits",
    "batch_size_of",
    "decode",
    "describe_batch",
    "encode",
    "generate_text",
    "load_dataset",
    "move_batch",
    "shard_indices",
    "shard_size",
    "split_dataset",
    "split_indices",
    "split_loaders",
    "split_size",
    "torch_loader",
]
