"""A DataLoader whose iteration failed has its worker processes ended at once, not at a later garbage
collection (where torch's shutdown waited 5 s a worker: a 10-s freeze inside the user's next cell)."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from workbench import models
from workbench.data import LoaderConfig
from workbench.data.collate_errors import explained
from workbench.train import TrainConfig, Trainer


class _Samples(Dataset):
    """32 samples of 4 features; `broken` makes each a dict holding an object (torch cannot batch it) or
    raises the user's own error, both inside the worker processes."""

    def __init__(self, broken: str | None = None):
        self.broken = broken

    def __len__(self):
        return 32

    def __getitem__(self, index):
        if self.broken == "own error":
            raise KeyError("my own bug")
        if self.broken == "object":
            return {"x": torch.zeros(4), "note": object()}
        return torch.full((4,), float(index)), index % 2


@pytest.fixture
def new_processes():
    """The child processes alive now that were not before the test (other tests' loaders may keep theirs)."""
    before = {child.pid for child in multiprocessing.active_children()}
    return lambda: [child.pid for child in multiprocessing.active_children() if child.pid not in before]


@pytest.mark.parametrize(("broken", "error"), [("object", ValueError), ("own error", KeyError)])
def test_a_failed_fit_ends_its_loader_workers_before_the_error_reaches_the_user(broken, error, new_processes):
    config = TrainConfig(epochs=1, batch_size=8, loader=LoaderConfig(num_workers=2))
    loss = F.cross_entropy if broken != "object" else None
    with pytest.raises(error) as raised:
        Trainer(models.mlp(4, 2, hidden=(8,)), loss, _Samples(broken), config).fit()
    assert raised.value is not None  # the error (and its traceback, holding the iterator) is still alive here
    assert new_processes() == [], "the failed loader's workers outlived the error"


def test_a_model_that_fails_mid_epoch_ends_the_loader_workers_too(new_processes):
    """The error comes from the user's model, not the loader: the epoch's batches stop mid-way with their
    workers running, and the fit that failed ends them."""

    class FailsAtStep3(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer, self.calls = torch.nn.Linear(4, 2), 0

        def forward(self, x):
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("my model's bug")
            return self.layer(x)

    config = TrainConfig(epochs=1, batch_size=4, loader=LoaderConfig(num_workers=2))
    with pytest.raises(RuntimeError, match="my model's bug"):
        Trainer(FailsAtStep3(), F.cross_entropy, (_Samples(), _Samples()), config).fit()
    assert new_processes() == []


def test_an_evaluate_that_fails_in_the_model_ends_the_loader_workers(new_processes):
    """`trainer.evaluate()` called by the user (not from a fit) whose model raises mid-split."""

    class FailsInEval(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def forward(self, x):
            if not self.training:
                raise RuntimeError("my model's eval bug")
            return self.layer(x)

    config = TrainConfig(epochs=1, batch_size=4, loader=LoaderConfig(num_workers=2))
    trainer = Trainer(FailsInEval(), F.cross_entropy, (_Samples(), _Samples()), config)
    with pytest.raises(RuntimeError, match="my model's eval bug") as raised:
        trainer.evaluate("val")
    assert raised.value is not None
    assert new_processes() == []


def test_a_persistent_workers_loader_starts_fresh_workers_after_a_failure(new_processes):
    """The loader's kept iterator is dropped with its workers: the next epoch forks workers that see the
    dataset as it is now (the fixed one), where the kept workers held the copy from before."""
    dataset = _Samples("own error")
    loader = DataLoader(dataset, batch_size=8, num_workers=2, persistent_workers=True)
    with pytest.raises(KeyError, match="my own bug"):
        list(explained(loader))
    assert new_processes() == []
    dataset.broken = None
    batches = list(explained(loader))
    assert [len(batch[0]) for batch in batches] == [8, 8, 8, 8]
    assert sorted(torch.cat([batch[0][:, 0] for batch in batches]).tolist()) == list(map(float, range(32)))


def test_stopping_early_keeps_persistent_workers_for_the_next_epoch(new_processes):
    loader = DataLoader(_Samples(), batch_size=8, num_workers=2, persistent_workers=True)
    batches = explained(loader)
    next(batches)
    batches.close()  # the consumer stopped after one batch (a step limit)
    workers = new_processes()
    assert len(workers) == 2
    assert len(list(explained(loader))) == 4
    assert new_processes() == workers  # the same two processes served the next epoch


def test_samples_of_unequal_shapes_in_a_worker_name_two_that_differ():
    """In a worker, torch's collate sizes a shared batch from the first sample, and a larger first sample
    fails as "Trying to resize storage that is not resizable" before torch.stack could name the shapes."""

    class Shrinking(Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, index):
            return torch.zeros(16 - index), 0

    loader = DataLoader(Shrinking(), batch_size=4, num_workers=2)
    with pytest.raises(ValueError) as raised:
        next(explained(loader))
    said = str(raised.value)
    assert said.startswith(
        "the dataset's samples differ in shape (samples 0 and 1 are ((16,) float32, int) and ((15,) float32, "
        "int)): torch's default collate_fn stacks samples of one shape; pad them in a collate_fn"
    ), said
    assert "resize storage" in str(raised.value.__cause__)  # torch's own words stay as the cause


def test_a_torch_loader_still_pickles_with_an_iteration_running():
    """`end_workers` keeps a loader's live iterations (weakly); a pickled copy (sent to ranks) leaves them."""
    import pickle

    from workbench.data import torch_loader

    loader = torch_loader(_Samples(), 8, train=False)
    batches = iter(loader)
    next(batches)
    copy = pickle.loads(pickle.dumps(loader))
    assert [len(x) for x, _ in copy] == [8, 8, 8, 8]
    copy.end_workers()  # nothing of the original's to end
    assert len(list(batches)) == 3
