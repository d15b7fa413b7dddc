"""Your own torch data, batched for one rank: map-style and iterable datasets, or a DataLoader you built.

- A **map-style** ``torch.utils.data.Dataset`` (``__getitem__`` + ``__len__``: TensorDataset, Subset, your
  own class) goes through a ``DataLoader`` whose sampler is `ShardSampler`: the same order rules as
  `ShardedLoader` (shuffled by seed + epoch, padded for training, every sample once for evaluation), so a
  TensorDataset trains exactly as the same tensors in a workbench `Dataset` do.
- An **IterableDataset** is read whole by every rank and DataLoader worker, each keeping one sample in every
  ``ranks × workers`` (`ShardedIterable`), so no sample is seen twice in an epoch. Give the whole stream:
  a dataset that already splits itself by ``get_worker_info()`` would be split twice.
- A **DataLoader** you built is used as it is on one rank. With several data ranks it is rebuilt around
  its dataset with the rank's `ShardSampler` (keeping its batch size, shuffling, workers, collate_fn,
  pin_memory and drop_last), as Accelerate's ``prepare`` does: otherwise every rank would train on every
  sample, and the ranks would not even agree on how many steps an epoch has. A custom sampler or
  batch_sampler cannot be sharded safely, so it is refused with what to do instead.

Loader options (workers, pinning, collate_fn...) come from a `LoaderConfig`.

    >>> import torch
    >>> from torch.utils.data import TensorDataset
    >>> data = TensorDataset(torch.arange(10.0).unsqueeze(1), torch.arange(10))
    >>> loader = torch_loader(data, 4, rank=1, world_size=2, train=True)
    >>> loader.set_epoch(0)
    >>> [len(x) for x, y in loader], loader.length
    ([4, 1], 2)
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import (
    DataLoader,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    Subset,
    TensorDataset,
    default_collate,
    get_worker_info,
)

from workbench._validate import check_int, naming_unknown_arguments
from workbench.data.batched_tensors import already_batched, batched_tensors
from workbench.data.collate_errors import explained
from workbench.data.loaders import shard_indices, shard_size
from workbench.data.worker_exit import end_workers


@dataclass(frozen=True)
class LoaderConfig:
    """How torch datasets are loaded (the in-memory workbench datasets need none of this).

    Args:
        num_workers: DataLoader worker processes, ≥ 0 (0: load in the training process); None: chosen by
            device and dataset (`default_workers`: none on CPU, where training uses every core, and none for
            a ``TensorDataset`` or ``random_split``'s part of one, whose samples are already in memory; on
            CUDA a few per GPU for another map-style dataset, so loading overlaps the GPU's work).
        pin_memory: page-locked batches for faster, asynchronous copies to the GPU; None: on when
            training on CUDA.
        persistent_workers: keep workers alive between epochs; None: on when there are workers and the
            dataset is map-style (an iterable dataset's copy in a worker would not see a new epoch).
        prefetch_factor: batches each worker loads ahead; None: torch's default (2). Needs workers.
        collate_fn: how a list of samples becomes a batch; None: torch's ``default_collate``.
        drop_last: drop each epoch's last, smaller training batch (evaluation never drops).

    Example:
        >>> LoaderConfig(num_workers=2).options("cuda", map_style=True)["pin_memory"]
        True
        >>> LoaderConfig(prefetch_factor=4)
        Traceback (most recent call last):
        ...
        ValueError: prefetch_factor=4 needs num_workers ≥ 1 (got num_workers=None): ...
    """

    num_workers: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    prefetch_factor: int | None = None
    collate_fn: Callable[[list[Any]], Any] | None = None
    drop_last: bool = False

    def __post_init__(self) -> None:
        if self.num_workers is not None:
            check_int("num_workers", self.num_workers, minimum=0)
        for name in ("pin_memory", "persistent_workers"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ValueError(f"{name} must be True, False or None (choose by device), got {value!r}")
        if not isinstance(self.drop_last, bool):
            raise ValueError(f"drop_last must be True or False, got {self.drop_last!r}")
        if self.prefetch_factor is not None:
            check_int("prefetch_factor", self.prefetch_factor, minimum=1)
            if not self.num_workers:  # 0, or None (chosen by device: none on CPU)
                raise ValueError(
                    f"prefetch_factor={self.prefetch_factor} needs num_workers ≥ 1 (got "
                    f"num_workers={self.num_workers}): "
                    "prefetching is done by workers; set num_workers or leave prefetch_factor=None"
                )
        if self.persistent_workers and not self.num_workers:
            raise ValueError(
                f"persistent_workers=True needs num_workers ≥ 1 (got num_workers={self.num_workers}); set "
                "num_workers or leave persistent_workers=None"
            )
        if self.collate_fn is not None and not callable(self.collate_fn):
            raise ValueError(
                f"collate_fn must be a function from a list of samples to a batch, got "
                f"{type(self.collate_fn).__name__}"
            )

    def options(self, device_type: str, *, map_style: bool, in_memory: bool = False) -> dict[str, Any]:
        """DataLoader keyword arguments for training on `device_type` ("cpu" or "cuda"); `in_memory`: the
        dataset's samples are tensors in memory already (a ``TensorDataset``, or a ``Subset`` of one)."""
        workers = self.num_workers
        if workers is None:
            gpus = torch.cuda.device_count() if device_type == "cuda" else 0
            workers = default_workers(device_type, map_style=map_style, gpus=gpus, in_memory=in_memory)
        options: dict[str, Any] = {
            "num_workers": workers,
            "pin_memory": device_type == "cuda" if self.pin_memory is None else self.pin_memory,
            "collate_fn": self.collate_fn,
        }
        if workers > 0:
            persistent = map_style if self.persistent_workers is None else self.persistent_workers
            options["persistent_workers"] = persistent
            if self.prefetch_factor is not None:
                options["prefetch_factor"] = self.prefetch_factor
        return options

    def to_dict(self) -> dict[str, Any]:
        """Plain values for JSON logs: collate_fn by its qualified name."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        collate = fields["collate_fn"]
        fields["collate_fn"] = None if collate is None else _qualified_name(collate)
        return fields


# DataLoader's own names for two of them
naming_unknown_arguments(LoaderConfig, aliases={"pin": "pin_memory", "workers": "num_workers"})


def default_workers(
    device_type: str, *, map_style: bool, cpu_count: int | None = None, gpus: int = 1, in_memory: bool = False
) -> int:
    """DataLoader workers when `LoaderConfig.num_workers` is None: 0 on CPU (the training process uses the
    cores), for iterable datasets (each worker would read the whole stream) and for a dataset already in
    memory (`in_memory`: a ``TensorDataset``; workers would only pickle its batches through shared memory:
    on an H100 machine, 2026-11-27, the Trainer on `bench trainer --peers`' MLP ran 2.25× the hand loop
    with 4 workers per loader); on CUDA, another map-style dataset gets up to 4 per GPU, leaving each GPU's
    training process a core.

    Example:
        >>> default_workers("cpu", map_style=True), default_workers("cuda", map_style=False)
        (0, 0)
        >>> default_workers("cuda", map_style=True, cpu_count=16, gpus=8), default_workers(
        ...     "cuda", map_style=True, cpu_count=64, gpus=8)
        (1, 4)
        >>> default_workers("cuda", map_style=True, cpu_count=64, in_memory=True)
        0
    """
    if device_type != "cuda" or not map_style or in_memory:
        return 0
    cores = cpu_count if cpu_count is not None else len(os.sched_getaffinity(0))
    return max(0, min(4, cores // max(gpus, 1) - 1))


def _in_memory(data: Any) -> bool:
    """Whether `data` is a TensorDataset, or Subsets of one (``random_split``'s halves): rows in memory."""
    while isinstance(data, Subset):
        data = data.dataset
    return isinstance(data, TensorDataset)


class ShardSampler(Sampler[int]):
    """Indices of one rank's shard of ``range(n)``, by `shard_indices` (DistributedSampler semantics).

    Example:
        >>> sampler = ShardSampler(10, rank=0, world_size=4, shuffle=False, remainder="pad")
        >>> list(sampler)
        [0, 4, 8]
    """

    def __init__(
        self,
        n: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        remainder: str = "pad",
    ) -> None:
        self.n, self.rank, self.world_size = n, rank, world_size
        self.shuffle, self.seed, self.remainder = shuffle, seed, remainder
        self.epoch = 0
        self._size = shard_size(n, rank=rank, world_size=world_size, remainder=remainder)  # validates

    def set_epoch(self, epoch: int) -> None:
        self.epoch = check_int("epoch", epoch, minimum=0)

    def __iter__(self) -> Iterator[int]:
        order = shard_indices(
            self.n,
            rank=self.rank,
            world_size=self.world_size,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=self.epoch,
            remainder=self.remainder,
        )
        return iter(order.tolist())

    def __len__(self) -> int:
        return self._size


class ShardedIterable(IterableDataset):
    """One rank's part of an iterable dataset: of the stream, DataLoader worker ``w`` of rank ``r`` keeps
    the samples ``i`` with ``i % (ranks·workers) == r·workers + w`` (each sample once per epoch overall).

    Example:
        >>> list(ShardedIterable(range(10), rank=1, world_size=3))
        [1, 4, 7]
    """

    def __init__(self, dataset: Any, *, rank: int = 0, world_size: int = 1) -> None:
        self.dataset, self.rank, self.world_size = dataset, rank, world_size

    def __iter__(self) -> Iterator[Any]:
        worker = get_worker_info()
        workers, worker_id = (worker.num_workers, worker.id) if worker is not None else (1, 0)
        shards, shard = self.world_size * workers, self.rank * workers + worker_id
        for index, sample in enumerate(self.dataset):
            if index % shards == shard:
                yield sample

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)


class TorchLoader:
    """A DataLoader over one rank's shard with what the loop needs: `set_epoch`, `length` (None when
    unknown, e.g. an iterable dataset without ``__len__``) and `sample_batch` (a one-sample batch).

    Example (rank 1 of 2 evaluating ten samples: every other one, in order):
        >>> from torch.utils.data import TensorDataset
        >>> loader = torch_loader(TensorDataset(torch.arange(10.0)), 2, rank=1, world_size=2, train=False)
        >>> len(loader), loader.num_samples, [batch[0].tolist() for batch in loader]
        (3, 5, [[1.0, 3.0], [5.0, 7.0], [9.0]])
        >>> loader.sample_batch()
        [tensor([0.])]
    """

    def __init__(self, loader: DataLoader, length: int | None) -> None:
        self.loader = loader
        self.length = length
        # a sampler gives every rank the same number of batches; an iterable's shards may differ by one
        self.even_across_ranks = not isinstance(loader.dataset, IterableDataset)
        self._iterations: weakref.WeakSet = weakref.WeakSet()  # the DataLoader iterators not yet freed

    def set_epoch(self, epoch: int) -> None:
        """Use the order of `epoch` from the next iteration on (the sampler's or dataset's set_epoch)."""
        for owner in (self.loader.sampler, self.loader.dataset):
            if hasattr(owner, "set_epoch") and not isinstance(owner, SequentialSampler | RandomSampler):
                owner.set_epoch(epoch)

    @property
    def num_samples(self) -> int | None:
        """Samples this rank serves per epoch, when known."""
        sampler = self.loader.sampler
        if isinstance(self.loader.dataset, IterableDataset):
            return None
        return len(sampler) if hasattr(sampler, "__len__") else None

    def sample_batch(self) -> Any:
        """A batch of one sample of the dataset (for a rank that must join a forward with no data)."""
        dataset = self.loader.dataset
        collate = self.loader.collate_fn if self.loader.batch_size is not None else default_collate
        if getattr(dataset, "__getitems__", None) and not isinstance(dataset, IterableDataset):
            return collate(dataset.__getitems__([0]))  # a batched fetch, as the DataLoader makes it
        sample = next(iter(dataset)) if isinstance(dataset, IterableDataset) else dataset[0]
        return collate([sample])

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError("this loader's length is unknown (an iterable dataset without __len__)")
        return self.length

    def __iter__(self) -> Iterator[Any]:
        iterator = iter(self.loader)
        self._iterations.add(iterator)
        return explained(self.loader, iterator)  # torch's default collate failing: said with the fix

    def __getstate__(self) -> dict[str, Any]:  # pickled (sent to ranks): its iterations stay in this process
        return {**self.__dict__, "_iterations": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _iterations=weakref.WeakSet())

    def end_workers(self) -> None:
        """Stop the worker processes of this loader's iterations now (after a failure: `worker_exit`)."""
        for iterator in list(self._iterations):
            end_workers(self.loader, iterator)

    def __repr__(self) -> str:
        length = "unknown length" if self.length is None else f"{self.length} batches"
        return f"TorchLoader({type(self.loader.dataset).__name__}, {length})"


def torch_loader(
    data: Any,
    batch_size: int,
    *,
    rank: int = 0,
    world_size: int = 1,
    train: bool = True,
    seed: int = 0,
    config: LoaderConfig | None = None,
    device_type: str = "cpu",
) -> TorchLoader:
    """A `TorchLoader` for rank `rank` of `world_size` over `data`: a map-style torch dataset, an
    IterableDataset or a DataLoader (see the module doc). Training shuffles and pads; evaluation keeps
    the order and serves every sample once."""
    config = config if config is not None else LoaderConfig()
    if isinstance(data, DataLoader):
        if world_size == 1:
            return TorchLoader(data, _dataloader_length(data))
        return _rebuilt(data, rank=rank, world_size=world_size, train=train, seed=seed)
    map_style = not isinstance(data, IterableDataset)
    options = config.options(device_type, map_style=map_style, in_memory=_in_memory(data))
    drop_last = config.drop_last and train
    if not map_style:
        shard = ShardedIterable(data, rank=rank, world_size=world_size)
        loader = DataLoader(shard, batch_size=batch_size, drop_last=drop_last, **options)
        return TorchLoader(
            loader, _iterable_length(data, rank, world_size, loader, batch_size, drop_last, train)
        )
    sampler = ShardSampler(
        len(data),
        rank=rank,
        world_size=world_size,
        shuffle=train,
        seed=seed,
        remainder="pad" if train else "uneven",
    )
    fast = batched_tensors(data) if options["collate_fn"] is None else None
    if fast is not None:  # a TensorDataset's rows: indexed a batch at a time, not fetched one by one
        data, options = fast, {**options, "collate_fn": already_batched}
    loader = DataLoader(data, batch_size=batch_size, sampler=sampler, drop_last=drop_last, **options)
    return TorchLoader(loader, len(loader))


def _rebuilt(loader: DataLoader, *, rank: int, world_size: int, train: bool, seed: int) -> TorchLoader:
    """`loader`'s dataset and settings, with rank `rank`'s shard of the samples."""
    dataset = loader.dataset
    kept = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
    }
    if loader.num_workers > 0:
        kept.update(prefetch_factor=loader.prefetch_factor, persistent_workers=loader.persistent_workers)
    if loader.batch_size is None:
        raise ValueError(
            "a DataLoader with a batch_sampler (or batch_size=None) cannot be split across "
            f"{world_size} data-parallel ranks safely; give the dataset itself (Trainer batches it with "
            "TrainConfig.batch_size and LoaderConfig) or a DataLoader built with batch_size=..."
        )
    drop_last = loader.drop_last and train
    if isinstance(dataset, IterableDataset):
        shard = ShardedIterable(dataset, rank=rank, world_size=world_size)
        rebuilt = DataLoader(shard, batch_size=loader.batch_size, drop_last=drop_last, **kept)
        length = _iterable_length(dataset, rank, world_size, rebuilt, loader.batch_size, drop_last, train)
        return TorchLoader(rebuilt, length)
    if not isinstance(loader.sampler, RandomSampler | SequentialSampler):
        raise ValueError(
            f"a DataLoader with a custom sampler ({type(loader.sampler).__name__}) cannot be split across "
            f"{world_size} data-parallel ranks safely: each rank would need its own part of that sampler's "
            "order. Give the dataset itself (each rank then gets a shuffled shard by seed and epoch), or "
            "shard inside your sampler and train with a single-device strategy per process"
        )
    sampler = ShardSampler(
        len(dataset),
        rank=rank,
        world_size=world_size,
        shuffle=train and isinstance(loader.sampler, RandomSampler),
        seed=seed,
        remainder="pad" if train else "uneven",
    )
    rebuilt = DataLoader(dataset, batch_size=loader.batch_size, sampler=sampler, drop_last=drop_last, **kept)
    return TorchLoader(rebuilt, len(rebuilt))


def _dataloader_length(loader: DataLoader) -> int | None:
    try:
        return len(loader)
    except TypeError:  # an iterable dataset without __len__
        return None


def _iterable_length(
    dataset: Any,
    rank: int,
    world_size: int,
    loader: DataLoader,
    batch_size: int,
    drop_last: bool,
    train: bool,
) -> int | None:
    """Batches rank `rank` gets from an iterable dataset of known length (each worker batches its own
    samples), or None when the dataset has no ``__len__``. In training the ranks step together until the
    first runs out, so every rank counts the fewest any rank has."""
    try:
        n = len(dataset)
    except TypeError:
        return None
    workers = max(loader.num_workers, 1)
    shards = world_size * workers

    def batches_of(shard_rank: int) -> int:
        total = 0
        for worker in range(workers):
            count = len(range(shard_rank * workers + worker, n, shards))
            total += count // batch_size if drop_last else math.ceil(count / batch_size)
        return total

    return min(batches_of(r) for r in range(world_size)) if train else batches_of(rank)


def _qualified_name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}.{name}" if module else name
