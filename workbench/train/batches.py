"""Which batches the loop takes: each split's loader for this rank's shard, and the micro-batches of every
optimizer step."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from workbench.data import ShardedLoader, Splits
from workbench.train.config import TrainConfig
from workbench.train.strategy import Batch, Strategy


def split_loaders(splits: Splits, config: TrainConfig, strategy: Strategy) -> dict[str, ShardedLoader]:
    """A loader per non-empty split over this rank's shard: train shuffled and padded so every rank takes
    the same number of steps, val and test in order and uneven (every sample counted once)."""
    return {
        name: ShardedLoader(
            getattr(splits, name),
            config.batch_size,
            shuffle=name == "train",
            seed=config.seed,
            rank=strategy.data_rank,
            world_size=strategy.data_world_size,
            remainder="pad" if name == "train" else "uneven",
        )
        for name in ("train", "val", "test")
        if len(getattr(splits, name)) > 0
    }


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
