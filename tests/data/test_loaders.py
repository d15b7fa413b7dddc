import math
from collections import Counter

import pytest
import torch
from torch.utils.data import DistributedSampler

from workbench.data import (
    ShardedLoader,
    load_dataset,
    shard_indices,
    shard_size,
    split_dataset,
    split_loaders,
)

SIZES = [1, 2, 7, 64, 100, 1797]
WORLD_SIZES = [1, 2, 3, 4]


def _all_ranks(n, world_size, **options):
    return [shard_indices(n, rank=r, world_size=world_size, **options).tolist() for r in range(world_size)]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("epoch", [0, 3])
def test_uneven_sees_every_sample_exactly_once_per_epoch(n, world_size, epoch):
    shards = _all_ranks(n, world_size, remainder="uneven", seed=11, epoch=epoch)
    assert Counter(i for shard in shards for i in shard) == Counter(range(n))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("remainder", ["pad", "drop"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_pad_and_drop_match_torch_distributed_sampler(n, world_size, remainder, shuffle):
    for epoch in (0, 2):
        for rank in range(world_size):
            sampler = DistributedSampler(
                range(n),
                num_replicas=world_size,
                rank=rank,
                shuffle=shuffle,
                seed=5,
                drop_last=remainder == "drop",
            )
            sampler.set_epoch(epoch)
            ours = shard_indices(
                n, rank=rank, world_size=world_size, shuffle=shuffle, seed=5, epoch=epoch, remainder=remainder
            )
            assert ours.tolist() == list(sampler)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_pad_gives_equal_shards_and_every_sample_at_least_once(n, world_size):
    shards = _all_ranks(n, world_size, remainder="pad")
    assert {len(s) for s in shards} == {math.ceil(n / world_size)}
    counts = Counter(i for shard in shards for i in shard)
    assert set(counts) == set(range(n))
    assert sum(counts.values()) - n == math.ceil(n / world_size) * world_size - n  # only the padding repeats


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("remainder", ["pad", "drop", "uneven"])
def test_shard_size_is_the_length_of_the_shard(n, world_size, remainder):
    for rank in range(world_size):
        options = {"rank": rank, "world_size": world_size, "remainder": remainder}
        assert shard_size(n, **options) == len(shard_indices(n, **options))


def test_divisible_sizes_see_every_sample_exactly_once_under_every_policy():
    for remainder in ("pad", "drop", "uneven"):
        shards = _all_ranks(120, 4, remainder=remainder)
        assert sorted(i for s in shards for i in s) == list(range(120))


def test_set_epoch_reshuffles_and_keeps_shards_disjoint():
    data = load_dataset("regression", n_samples=103, n_features=2)
    loaders = [ShardedLoader(data, 8, rank=r, world_size=3, remainder="uneven", seed=1) for r in range(3)]
    orders = []
    for epoch in range(2):
        for loader in loaders:
            loader.set_epoch(epoch)
        orders.append([loader.indices().tolist() for loader in loaders])
        assert sorted(i for shard in orders[-1] for i in shard) == list(range(103))
    assert orders[0] != orders[1]


def test_batches_hold_the_shards_samples_in_order():
    data = load_dataset("digits")
    loader = ShardedLoader(data, batch_size=100, rank=1, world_size=3, seed=2)
    batches = list(loader)
    assert len(batches) == len(loader) == math.ceil(599 / 100)
    assert [len(x) for x, _ in batches] == [100] * 5 + [99]
    features = torch.cat([x for x, _ in batches])
    targets = torch.cat([y for _, y in batches])
    assert torch.equal(features, data.features[loader.indices()])
    assert torch.equal(targets, data.targets[loader.indices()])


def test_split_loaders_pad_training_and_see_evaluation_data_once():
    splits = split_dataset(load_dataset("digits"), seed=0)
    per_rank = [split_loaders(splits, 32, rank=r, world_size=4) for r in range(4)]
    assert len({loaders.train.num_samples for loaders in per_rank}) == 1  # same step count on every rank
    val = Counter(i for loaders in per_rank for i in loaders.val.indices().tolist())
    assert val == Counter(range(len(splits.val)))
    assert all(loaders.test.shuffle is False for loaders in per_rank)


def test_split_loaders_of_splits_without_test_samples_or_without_a_test_split_serve_no_test_batches():
    """A test split of 0 samples: its loader said "n must be an integer ≥ 1, got 0"."""
    from workbench.data import Splits

    splits = split_dataset(load_dataset("digits"), (0.8, 0.2, 0.0), seed=0)
    loaders = split_loaders(splits, 32, rank=1, world_size=2)
    assert (len(loaders.test), loaders.test.num_samples, list(loaders.test)) == (0, 0, [])
    assert split_loaders(Splits(splits.train, val=splits.val), 32).test is None
    with pytest.raises(ValueError, match=r"dataset 'digits' has no samples, and remainder='pad' repeats"):
        ShardedLoader(splits.test, 32)  # a training loader needs samples
    with pytest.raises(ValueError, match=r"rank must be in 0..world_size-1 = 0..1, got 2"):
        ShardedLoader(splits.test, 32, rank=2, world_size=2, remainder="uneven")  # checked when empty too


def test_a_torch_dataset_is_refused_with_the_loader_that_takes_it():
    from torch.utils.data import TensorDataset

    from workbench.data import Splits

    data = TensorDataset(torch.randn(10, 3), torch.zeros(10))
    with pytest.raises(ValueError, match=r"workbench.data.Dataset .*got TensorDataset; .*torch_loader\("):
        ShardedLoader(data, 4)
    with pytest.raises(ValueError, match=r"got TensorDataset"):
        split_loaders(Splits(data), 4)  # a Splits of torch data is the Trainer's; its loaders: torch_loader


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"world_size": 0}, r"world_size must be an integer ≥ 1, got 0"),
        ({"world_size": 2, "rank": 2}, r"rank must be in 0..world_size-1 = 0..1, got 2"),
        ({"rank": -1}, r"rank must be an integer ≥ 0"),
        (
            {"remainder": "wrap"},
            r"remainder='wrap' is not supported; allowed values: 'pad', 'drop', 'uneven'",
        ),
        ({"batch_size": 0}, r"batch_size must be an integer ≥ 1"),
    ],
)
def test_bad_arguments_raise_value_error_naming_the_field(options, message):
    data = load_dataset("digits")
    options = {"batch_size": 16, **options}
    with pytest.raises(ValueError, match=message):
        ShardedLoader(data, **options)


def test_bad_epoch_is_refused():
    loader = ShardedLoader(load_dataset("digits"), 16)
    with pytest.raises(ValueError, match="epoch must be an integer ≥ 0"):
        loader.set_epoch(-1)


def test_a_dataset_on_a_device_is_indexed_with_indices_already_there():
    """Indexing a GPU-resident dataset with a CPU index copies it from pageable memory at every batch, and
    that copy waits for the GPU's queued work (the Trainer ran 1.14× a hand loop on an H100): the epoch's
    order moves to the features' device once. Shown on the meta device, which records the index's device."""
    import dataclasses

    from torch.utils._python_dispatch import TorchDispatchMode

    class IndexDevices(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.devices = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.index.Tensor:
                self.devices += [index.device.type for index in args[1] if index is not None]
            return func(*args, **(kwargs or {}))

    digits = load_dataset("digits")
    on_meta = dataclasses.replace(
        digits, features=digits.features.to("meta"), targets=digits.targets.to("meta")
    )
    with IndexDevices() as recorded:
        batches = list(ShardedLoader(on_meta, batch_size=256))
    assert len(batches) == 8 and batches[0][0].device.type == "meta"
    assert recorded.devices and set(recorded.devices) == {"meta"}, recorded.devices
