"""Which batches the loop takes: each split's loader for this rank's shard, and the micro-batches of every
optimizer step."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from workbench.data import Dataset, ShardedLoader, Splits, TorchLoader, split_size, torch_loader
from workbench.data.device_feed import device_resident, prefetch_to_device
from workbench.train.config import TrainConfig
from workbench.train.strategy import Batch, Strategy

Loader = ShardedLoader | TorchLoader


def split_loaders(splits: Splits, config: TrainConfig, strategy: Strategy) -> dict[str, Loader]:
    """A loader per non-empty split over this rank's shard: train shuffled and padded so every rank takes
    the same number of steps, val and test in order and uneven (every sample counted once).

    A workbench `Dataset` takes the in-memory fast path (`ShardedLoader`: index the tensors, no
    DataLoader), on a GPU from the device's memory when it fits there (`device_resident`); torch datasets
    and DataLoaders go through `torch_loader` with ``config.loader``.
    """
    loaders: dict[str, Loader] = {}
    for name in ("train", "val", "test"):
        data = getattr(splits, name)
        if data is None or split_size(data) == 0:
            continue
        common = {"seed": config.seed, "rank": strategy.data_rank, "world_size": strategy.data_world_size}
        if isinstance(data, Dataset):
            data = device_resident(data, strategy.device)
            remainder = "pad" if name == "train" else "uneven"
            loaders[name] = ShardedLoader(
                data, config.batch_size, shuffle=name == "train", remainder=remainder, **common
            )
        else:
            loader = torch_loader(
                data,
                config.batch_size,
                train=name == "train",
                config=config.loader,
                device_type=strategy.device.type,
                **common,
            )
            if loader.length != 0:
                loaders[name] = loader
    return loaders


def needs_lockstep(loader: Loader, strategy: Strategy) -> bool:
    """True when data ranks may run out of batches at different steps (an iterable dataset's shards),
    so each step must first check that every rank has one."""
    return strategy.data_world_size > 1 and not getattr(loader, "even_across_ranks", True)


def lockstep(groups: Iterable[list[Batch]], strategy: Strategy) -> Iterator[list[Batch]]:
    """`groups` while every rank still has one: one tiny all-reduce per step; the epoch ends for all
    ranks when the first runs out (its remaining samples on the other ranks wait for the next epoch)."""
    iterator = iter(groups)
    while True:
        group = next(iterator, None)
        exhausted = torch.tensor(1.0 if group is None else 0.0, device=strategy.device)
        if strategy.all_reduce(exhausted, "max").item() > 0:
            return
        yield group


def with_last(items: Iterable[Any]) -> Iterator[tuple[Any, bool]]:
    """``(item, is_last)`` for each item, looking one ahead (for loaders whose length is unknown).

    Example:
        >>> list(with_last("abc"))
        [('a', False), ('b', False), ('c', True)]
    """
    iterator = iter(items)
    sentinel = object()
    current = next(iterator, sentinel)
    while current is not sentinel:
        following = next(iterator, sentinel)
        yield current, following is sentinel
        current = following


def device_batches(loader: Loader, device: torch.device, skip: int = 0) -> Iterator[Batch]:
    """The loader's batches after the first `skip` (used before a resume), on a GPU each copied one batch
    ahead from pinned memory (`prefetch_to_device`); on a CPU as the loader gives them.

    Example:
        >>> list(device_batches([1, 2, 3, 4], torch.device("cpu"), skip=1))
        [2, 3, 4]
    """
    return prefetch_to_device(itertools.islice(loader, skip, None), device)


def step_groups(batches: Iterable[Batch], accumulate: int, skip: int = 0) -> Iterator[list[Batch]]:
    """`batches` in groups of `accumulate` (one optimizer step each; the last may be shorter), leaving out
    the first `skip` batches (already used before a resume).

    Example:
        >>> [len(group) for group in step_groups(range(7), accumulate=3)]
        [3, 3, 1]
        >>> list(step_groups(range(7), accumulate=3, skip=5))
        [[5, 6]]
    """
    group: list[Batch] = []
    for index, batch in enumerate(batches):
        if index < skip:
            continue
        group.append(batch)
        if len(group) == accumulate:
            yield group
            group = []
    if group:
        yield group
