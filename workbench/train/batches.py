"""Which batches the loop takes: each split's loader for this rank's shard, and the micro-batches of every
optimizer step."""

from __future__ import annotations

import contextlib
import itertools
import warnings
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


def end_workers(loaders: Iterable[Loader]) -> None:
    """End the DataLoader worker processes of `loaders` now (a fit that failed: `workbench.data.worker_exit`);
    a later epoch starts new ones."""
    for loader in loaders:
        if isinstance(loader, TorchLoader):
            loader.end_workers()


@contextlib.contextmanager
def workers_ended_on_error(loader: Loader) -> Iterator[None]:
    """End `loader`'s DataLoader workers when the block raises (the user's model failed mid-split): now, not
    at the garbage collection that frees the error's traceback, which waits 5 s a worker."""
    try:
        yield
    except BaseException:
        end_workers([loader])
        raise


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


def count_steps(
    loaders: dict[str, Loader], config: TrainConfig, *, warn: bool = True
) -> tuple[int | None, int | None]:
    """Optimizer steps per epoch and in the whole fit (``config.max_steps`` when given); None for a training
    split without a length (an iterable dataset without ``__len__``: progress then shows the steps done, no
    total). Refuses a training split that gives no batch, and a schedule that needs the fit's length when it
    is unknown; warns (where `warn`: the main rank) of epochs set beside max_steps that would have ended the
    fit sooner: max_steps overrides them."""
    if "train" not in loaders:
        raise ValueError(
            "the training split gives no batches (every batch dropped: drop_last with fewer samples per rank "
            "than batch_size); lower batch_size or set drop_last=False"
        )
    batches = loaders["train"].length
    per_epoch = None if batches is None else -(-batches // config.accumulate)
    sooner = (
        per_epoch is not None
        and config.max_steps is not None
        and per_epoch * config.epochs < config.max_steps
    )
    if warn and sooner and config.epochs != TrainConfig.epochs:  # epochs set to end it sooner, perhaps
        _warn_epochs_unused(config, per_epoch)
    if per_epoch is None and config.optimizer.schedule != "constant" and config.max_steps is None:
        raise ValueError(
            f"schedule={config.optimizer.schedule!r} needs the number of steps, but the training split's "
            "length is unknown (an IterableDataset without __len__); give the fit its length, "
            "TrainConfig(max_steps=...), or the dataset a __len__, or use schedule='constant' (warm-up "
            "still works)"
        )
    if per_epoch is None:
        return None, config.max_steps
    return per_epoch, config.max_steps or per_epoch * config.epochs


def _warn_epochs_unused(config: TrainConfig, per_epoch: int) -> None:
    length = f"{config.max_steps / per_epoch:.3g} epochs of {per_epoch} steps"
    warnings.warn(
        f"max_steps={config.max_steps} sets the fit's length ({length}) in epochs' place, so "
        f"epochs={config.epochs} ({config.epochs * per_epoch} steps) does not end it; leave one of them out",
        stacklevel=5,  # the Trainer's caller
    )


def fit_epochs(config: TrainConfig, steps_per_epoch: int | None) -> int | None:
    """The epochs a fit begins: ``config.epochs``, or with ``max_steps`` as many as its steps reach into (the
    last maybe ended inside); None when ``max_steps`` meets a training split of unknown length.

    Example:
        >>> fit_epochs(TrainConfig(max_steps=25), steps_per_epoch=10), fit_epochs(TrainConfig(epochs=2), 10)
        (3, 2)
    """
    if config.max_steps is None:
        return config.epochs
    return None if steps_per_epoch is None else -(-config.max_steps // steps_per_epoch)


def no_epoch_end(config: TrainConfig, steps_per_epoch: int | None) -> str | None:
    """Why a fit of ``max_steps`` reaches no epoch's end (what judges the epochs' ends never acts), or None.

    Example:
        >>> no_epoch_end(TrainConfig(max_steps=5), steps_per_epoch=10)
        "this fit of max_steps=5 ends before its first epoch's end (10 steps)"
        >>> no_epoch_end(TrainConfig(max_steps=25), steps_per_epoch=10) is None
        True
    """
    if config.max_steps is None or (steps_per_epoch is not None and config.max_steps >= steps_per_epoch):
        return None
    reach = (
        f"ends before its first epoch's end ({steps_per_epoch} steps)"
        if steps_per_epoch is not None
        else "may reach no epoch's end (the training data has no length: a stream never ends its epoch)"
    )
    return f"this fit of max_steps={config.max_steps} {reach}"


def fit_done(config: TrainConfig, step: int, epoch: int) -> bool:
    """Whether a fit `step` optimizer steps and `epoch` whole epochs in has trained all it is to: its
    ``max_steps`` steps, else its ``epochs``."""
    return step >= config.max_steps if config.max_steps is not None else epoch >= config.epochs


def epoch_steps(
    loader: Loader, epoch: int, position: int, config: TrainConfig, strategy: Strategy
) -> Iterator[tuple[list[Batch], bool]]:
    """The rest of epoch `epoch` (after `position` micro-batches) as ``(group, last)``: each step's
    micro-batches on the strategy's device, True for the epoch's last step; ranks of uneven iterable
    shards step in lockstep."""
    loader.set_epoch(epoch)
    groups = step_groups(device_batches(loader, strategy.device, position), config.accumulate)
    return with_last(lockstep(groups, strategy) if needs_lockstep(loader, strategy) else groups)


def check_epoch_trained(epoch: int, from_start: bool, steps: int) -> None:
    """ValueError for an epoch that, run from its start, gave no step (`steps` 0)."""
    if from_start and steps == 0:
        raise ValueError(
            f"the training data gave no batch in epoch {epoch + 1}, so nothing was trained: an "
            "IterableDataset whose __iter__ yields nothing (or a generator already used up: __iter__ must "
            "start a new pass each time it is called)"
        )
