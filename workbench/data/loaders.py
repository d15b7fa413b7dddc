"""Mini-batches of one rank's shard of an in-memory dataset, with DistributedSampler semantics.

Rank ``r`` of ``world_size`` takes every ``world_size``-th index of the epoch's order, starting at ``r``.
The order is ``torch.randperm(n)`` seeded with ``seed + epoch`` (or ``range(n)`` without shuffling), exactly
as ``torch.utils.data.DistributedSampler`` builds it, so shards match that sampler index for index. What
happens when ``n`` is not a multiple of ``world_size`` is the ``remainder`` policy:

- ``"pad"``: repeat the first indices so every rank gets ``ceil(n / world_size)`` (DistributedSampler's
  default; every rank runs the same number of steps, which DDP training needs).
- ``"drop"``: drop the tail so every rank gets ``floor(n / world_size)`` (DistributedSampler's drop_last).
- ``"uneven"``: no padding, no dropping: every sample is seen exactly once per epoch across ranks and
  shard sizes differ by at most one (for evaluation, where a padded duplicate would skew the metric).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from workbench._validate import check_choice, check_int
from workbench.data.datasets import Dataset
from workbench.data.splits import Splits

REMAINDER_POLICIES = ("pad", "drop", "uneven")


def shard_indices(
    n: int,
    *,
    rank: int = 0,
    world_size: int = 1,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    remainder: str = "pad",
) -> torch.Tensor:
    """Indices (int64, 1-D) of rank ``rank``'s shard of ``range(n)`` for ``epoch``; see the module doc.

    Example (10 samples on 4 ranks, in order to show the pattern):
        >>> shard_indices(10, rank=1, world_size=4, shuffle=False)  # padded: 3 each, 0 and 1 twice in all
        tensor([1, 5, 9])
        >>> shard_indices(10, rank=1, world_size=4, shuffle=False, remainder="drop")
        tensor([1, 5])
    """
    _check_shard(n, rank, world_size, remainder)
    if shuffle:
        generator = torch.Generator().manual_seed(seed + epoch)
        order = torch.randperm(n, generator=generator)
    else:
        order = torch.arange(n)
    if remainder == "pad":
        total = math.ceil(n / world_size) * world_size
        order = order.repeat(math.ceil(total / n))[:total]
    elif remainder == "drop":
        order = order[: (n // world_size) * world_size]
    return order[rank::world_size]


def shard_size(n: int, *, rank: int = 0, world_size: int = 1, remainder: str = "pad") -> int:
    """``len(shard_indices(...))`` for the same arguments, without building the permutation.

    Example:
        >>> [shard_size(10, rank=rank, world_size=4, remainder="uneven") for rank in range(4)]
        [3, 3, 2, 2]
    """
    _check_shard(n, rank, world_size, remainder)
    if remainder == "pad":
        return math.ceil(n / world_size)
    if remainder == "drop":
        return n // world_size
    return len(range(rank, n, world_size))


def _check_shard(n: int, rank: int, world_size: int, remainder: str) -> None:
    check_int("n", n, minimum=1)
    check_int("world_size", world_size, minimum=1)
    check_int("rank", rank, minimum=0)
    if rank >= world_size:
        raise ValueError(f"rank must be in 0..world_size-1 = 0..{world_size - 1}, got {rank}")
    check_choice("remainder", remainder, REMAINDER_POLICIES)


class ShardedLoader:
    """Batches ``(features, targets)`` of this rank's shard of ``dataset``; reshuffled by ``set_epoch``.

    Args:
        dataset: an in-memory :class:`~workbench.data.Dataset`.
        batch_size: samples per batch (the last batch of an epoch may be smaller).
        rank, world_size: which shard, of how many (``0 ≤ rank < world_size``).
        shuffle: a new order every epoch (seeded with ``seed + epoch``) instead of dataset order.
        seed: must be the same on every rank so the shards are disjoint.
        remainder: ``"pad"``, ``"drop"`` or ``"uneven"``; see :mod:`workbench.data.loaders`.

    Example:
        >>> from workbench.data import load_dataset
        >>> loader = ShardedLoader(load_dataset("digits"), batch_size=64, rank=1, world_size=2)
        >>> loader.set_epoch(3)
        >>> x, y = next(iter(loader))
        >>> tuple(x.shape), tuple(y.shape), len(loader)
        ((64, 1, 8, 8), (64,), 15)
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        remainder: str = "pad",
    ) -> None:
        self.dataset = _check_in_memory(dataset, remainder)
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        self.rank, self.world_size = rank, world_size
        self.shuffle, self.seed, self.remainder = shuffle, seed, remainder
        self.epoch = 0
        _shard_size(len(dataset), rank, world_size, remainder)  # validate now

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch`` from the next iteration on (as DistributedSampler.set_epoch)."""
        self.epoch = check_int("epoch", epoch, minimum=0)

    def indices(self) -> torch.Tensor:
        """This rank's sample indices for the current epoch, in the order they will be served."""
        if len(self.dataset) == 0:  # an empty evaluation split
            return torch.zeros(0, dtype=torch.int64)
        return shard_indices(
            len(self.dataset),
            rank=self.rank,
            world_size=self.world_size,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=self.epoch,
            remainder=self.remainder,
        )

    @property
    def num_samples(self) -> int:
        """Samples this rank serves per epoch."""
        return _shard_size(len(self.dataset), self.rank, self.world_size, self.remainder)

    @property
    def length(self) -> int:
        """Batches per epoch (always known for an in-memory dataset)."""
        return len(self)

    def sample_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of the dataset's first sample (for a rank that must join a forward with no data)."""
        return self.dataset.features[:1], self.dataset.targets[:1]

    def __len__(self) -> int:
        return math.ceil(self.num_samples / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = self.indices()
        if len(order) == 0:  # an empty split (split() would give one empty batch)
            return
        for batch in _on_device_of(order, self.dataset.features).split(self.batch_size):
            yield self.dataset.features[batch], self.dataset.targets[batch]

    def __repr__(self) -> str:
        return (
            f"ShardedLoader({self.dataset.name!r}, batch_size={self.batch_size}, rank={self.rank}, "
            f"world_size={self.world_size}, {self.num_samples} samples, {len(self)} batches)"
        )


def _check_in_memory(dataset: Any, remainder: str) -> Dataset:
    """`dataset` if it is an in-memory `Dataset` that a loader with `remainder` can serve, else a ValueError
    that names what was given and the loader for it (an empty split serves no batches, unless padded)."""
    if not isinstance(dataset, Dataset):
        raise ValueError(
            f"dataset must be a workbench.data.Dataset (features and targets in memory), got "
            f"{type(dataset).__name__}; for a torch Dataset or DataLoader use workbench.data.torch_loader("
            "data, batch_size, rank=..., world_size=...), or give it to the Trainer as it is"
        )
    if len(dataset) == 0 and remainder == "pad":
        raise ValueError(
            f"dataset {dataset.name!r} has no samples, and remainder='pad' repeats samples to fill every "
            "rank's shard; give a split with samples (training needs some), or remainder='uneven'"
        )
    return dataset


def _shard_size(n: int, rank: int, world_size: int, remainder: str) -> int:
    """`shard_size`, where an empty dataset (an evaluation split of 0 samples) has empty shards."""
    size = shard_size(max(n, 1), rank=rank, world_size=world_size, remainder=remainder)  # checks them all
    return 0 if n == 0 else size


def _on_device_of(order: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """The epoch's order where the features are, copied once per epoch: indexing a GPU-resident dataset
    with a CPU index copies that index from pageable memory at every batch, and such a copy waits for the
    GPU to finish its queued work, so the host could not queue a step while the last one ran (the Trainer
    measured 1.14× a hand loop that kept its order on the GPU, H100, 2026-11-26)."""
    if features.device == order.device:
        return order
    if features.device.type == "cuda":  # page-locked: the copy is queued, not waited for
        return order.pin_memory().to(features.device, non_blocking=True)
    return order.to(features.device)


@dataclass(frozen=True)
class SplitLoaders:
    """Loaders for three splits: train shuffles and pads; val/test keep order and see each sample once
    (None where `Splits` has none; an empty split's loader serves no batches).

    Example:
        >>> from workbench.data import Splits, load_dataset
        >>> digits = load_dataset("digits")
        >>> loaders = split_loaders(Splits(digits, val=digits), batch_size=100)  # no test split
        >>> len(loaders.train), len(loaders.val), loaders.test is None
        (18, 18, True)
    """

    train: ShardedLoader
    val: ShardedLoader | None
    test: ShardedLoader | None


def split_loaders(
    splits: Splits, batch_size: int, *, rank: int = 0, world_size: int = 1, seed: int = 0
) -> SplitLoaders:
    """The usual loaders for training on ``splits`` (of in-memory `Dataset`s, from `split_dataset`) as
    rank ``rank`` of ``world_size``.

    Example:
        >>> from workbench.data import load_dataset, split_dataset
        >>> splits = split_dataset(load_dataset("digits"), (0.8, 0.2, 0.0), seed=0)  # no test samples
        >>> loaders = split_loaders(splits, batch_size=64, rank=1, world_size=2)
        >>> len(loaders.train), loaders.val.num_samples, len(loaders.test)
        (12, 179, 0)
    """
    common = {"rank": rank, "world_size": world_size, "seed": seed}

    def evaluation(split: Dataset | None) -> ShardedLoader | None:
        if split is None:
            return None
        return ShardedLoader(split, batch_size, shuffle=False, remainder="uneven", **common)

    train = ShardedLoader(splits.train, batch_size, shuffle=True, remainder="pad", **common)
    return SplitLoaders(train=train, val=evaluation(splits.val), test=evaluation(splits.test))
