"""A TensorDataset (or random_split's Subset of one) is fetched a batch at a time: the same batches as the
DataLoader's sample-by-sample fetch, in the same order, on every rank, in worker processes too."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset, random_split

from workbench.data import LoaderConfig, torch_loaders
from workbench.data.batched_tensors import BatchedTensors, batched_tensors
from workbench.train import OptimizerConfig, TrainConfig, Trainer

X = torch.randn(50, 3, generator=torch.Generator().manual_seed(0))
Y = torch.arange(50) % 4


def _batches(data, **options):
    loader = torch_loaders.torch_loader(data, 8, **options)
    loader.set_epoch(1)
    return list(loader), loader


def _sample_by_sample(monkeypatch, data, **options):
    with monkeypatch.context() as patched:
        patched.setattr(torch_loaders, "batched_tensors", lambda data: None)
        return _batches(data, **options)


def _assert_equal(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert type(a) is type(b) and len(a) == len(b)
        assert all(torch.equal(s, t) and s.dtype == t.dtype for s, t in zip(a, b, strict=True))


twice_split = Subset(
    random_split(TensorDataset(X, Y), [40, 10], torch.Generator().manual_seed(1))[0], [5, 0, 39]
)


@pytest.mark.parametrize(
    "data",
    [
        TensorDataset(X, Y),
        TensorDataset(X),  # a model computing its own loss
        TensorDataset(X, X[:, :1].clone(), Y.float()),
        random_split(TensorDataset(X, Y), [40, 10], torch.Generator().manual_seed(1))[0],
        twice_split,  # a Subset of a Subset
    ],
    ids=["pair", "one tensor", "three tensors", "random_split", "subset of a subset"],
)
@pytest.mark.parametrize("rank", [0, 1])
def test_the_batches_equal_the_sample_by_sample_ones_on_each_rank(monkeypatch, data, rank):
    for train in (True, False):
        options = dict(rank=rank, world_size=2, train=train, seed=3)
        got, loader = _batches(data, **options)
        want, reference = _sample_by_sample(monkeypatch, data, **options)
        assert isinstance(loader.loader.dataset, BatchedTensors)
        assert not isinstance(reference.loader.dataset, BatchedTensors)
        _assert_equal(got, want)
        _assert_equal([loader.sample_batch()], [reference.sample_batch()])  # a rank without data's filler


def test_worker_processes_fetch_batches_too(monkeypatch):
    config = LoaderConfig(num_workers=2)
    got, loader = _batches(TensorDataset(X, Y), config=config)
    assert loader.loader.num_workers == 2
    _assert_equal(got, _sample_by_sample(monkeypatch, TensorDataset(X, Y), config=config)[0])


def test_what_may_change_a_sample_keeps_the_sample_by_sample_fetch():
    class Augmented(TensorDataset):
        def __getitem__(self, i):
            x, y = super().__getitem__(i)
            return x + 1, y

    assert batched_tensors(Augmented(X, Y)) is None and batched_tensors(Subset(Augmented(X, Y), [1])) is None
    seen = []

    def collate(samples):
        seen.append(len(samples))
        return torch.utils.data.default_collate(samples)

    batches, loader = _batches(TensorDataset(X, Y), config=LoaderConfig(collate_fn=collate))
    assert not isinstance(loader.loader.dataset, BatchedTensors)  # a collate_fn of yours sees the samples
    assert seen == [8] * 6 + [2] and len(batches) == 7


def test_a_fit_on_random_split_tensors_is_the_same_as_fetching_sample_by_sample(monkeypatch):
    train, val = random_split(TensorDataset(X, Y), [40, 10], torch.Generator().manual_seed(0))
    config = TrainConfig(epochs=2, batch_size=8, optimizer=OptimizerConfig("adam", lr=1e-2))

    def fit():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 4))
        result = Trainer(model, F.cross_entropy, (train, val), config, progress=False).fit()
        return result, model

    fast, fast_model = fit()
    with monkeypatch.context() as patched:
        patched.setattr(torch_loaders, "batched_tensors", lambda data: None)
        reference, reference_model = fit()
    assert (fast.train_loss, fast.metrics) == (reference.train_loss, reference.metrics)
    for p, q in zip(fast_model.parameters(), reference_model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_dataloader_over_batched_tensors_needs_the_matching_collate():
    fast = batched_tensors(TensorDataset(X, Y))
    batch = next(iter(DataLoader(fast, 4, collate_fn=torch_loaders.already_batched)))
    assert [t.shape for t in batch] == [torch.Size([4, 3]), torch.Size([4])]
    assert repr(fast) == "BatchedTensors(TensorDataset, 50 samples)"
