"""Your own data and models under DDP and FSDP on 2 gloo ranks (launch): the torch path gives the same
parameters as the in-memory path, a DataLoader is re-sharded, an iterable dataset steps in lockstep, and
the metrics reported (ours and torchmetrics') are exactly those of the whole split (evaluated again in one
process)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import f1_score
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from workbench import models
from workbench.data import Dataset as InMemory
from workbench.data import LoaderConfig, Splits, torch_loader
from workbench.parallel import launch
from workbench.parallel.strategies.fsdp import FullyShardedDataParallel
from workbench.parallel.strategies.tensor_parallel import TensorParallel
from workbench.train import OptimizerConfig, TrainConfig, Trainer
from workbench.train.metrics import F1

N, FEATURES, CLASSES, RANKS = 203, 6, 3, 2  # odd sizes: padded training shards, uneven evaluation shards


def _tensors():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, FEATURES, generator=generator)
    y = (x[:, 0] > 0.3).long() + (x[:, 1] > 0.5).long()
    return x, y


def _model():
    torch.manual_seed(0)
    return models.mlp(FEATURES, CLASSES, hidden=(16,))


def _config(**changes):
    base = dict(epochs=2, batch_size=8, optimizer=OptimizerConfig("adam", lr=1e-2), log_every=1, seed=5)
    return TrainConfig(**{**base, **changes})


def _parameters(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _fit(strategy, model, data, config, extra=None):
    result = Trainer(
        model, F.cross_entropy if extra is None else None, data, config, strategy=strategy, **(extra or {})
    ).fit()
    return result.step, result.metrics


def _single_process_metrics(model, x, y):
    with torch.no_grad():
        logits = model(x)
    return F.cross_entropy(logits, y).item(), (logits.argmax(-1) == y).float().mean().item()


STRATEGIES = {"ddp": None, "fsdp": FullyShardedDataParallel, "tensor": TensorParallel}


@pytest.mark.parametrize("name", ["ddp", "fsdp", "tensor"])
def test_a_tensor_dataset_trains_as_the_same_tensors_in_memory(name):
    x, y = _tensors()
    train, val = slice(0, 160), slice(160, N)
    in_memory = Splits(
        InMemory("mine", x[train], y[train], "classification", CLASSES),
        InMemory("mine", x[val], y[val], "classification", CLASSES),
    )
    torch_data = Splits(TensorDataset(x[train], y[train]), val=TensorDataset(x[val], y[val]))
    params, reports = [], []
    for data in (in_memory, torch_data):
        model = _model()
        strategy = STRATEGIES[name]() if STRATEGIES[name] is not None else None
        options = dict(model=model, threads_per_process=1, **({"strategy": strategy} if strategy else {}))
        reports.append(launch(_fit, RANKS, args=(model, data, _config()), **options))
        params.append(_parameters(model))
    torch.testing.assert_close(params[0], params[1], rtol=0, atol=0)
    steps, metrics = reports[1]
    # 160 samples: 80 per rank in 10 batches of 8; tensor parallel ranks share every batch: 20 batches
    assert steps == 2 * (20 if name == "tensor" else 10)
    loss, accuracy = _single_process_metrics(model, x[val], y[val])  # 43 samples, shards of 22 and 21
    assert metrics["val"]["loss"] == pytest.approx(loss, rel=1e-5)
    assert metrics["val"]["accuracy"] == pytest.approx(accuracy)


@pytest.mark.parametrize("sharded", [False, True], ids=["ddp", "fsdp"])
def test_a_users_dataloader_is_rebuilt_into_disjoint_shards_of_its_batch_size(sharded):
    x, y = _tensors()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, num_workers=2)
    model = _model()
    options = {"strategy": FullyShardedDataParallel()} if sharded else {}
    steps, _ = launch(
        _fit, RANKS, args=(model, loader, _config(epochs=1)), model=model, threads_per_process=1, **options
    )
    assert steps == 7  # ceil(203 / 2) = 102 samples per rank (padded), batches of the loader's 16
    shards = [torch_loader(loader, 16, rank=r, world_size=RANKS, train=False) for r in range(RANKS)]
    seen = [int(i) for shard in shards for i in shard.loader.sampler]
    assert sorted(seen) == list(range(N))  # evaluation order: every sample once across the ranks


class Stream(IterableDataset):
    """A stream of (x, y) without __len__."""

    def __iter__(self):
        x, y = _tensors()
        yield from zip(x, y, strict=True)


@pytest.mark.parametrize("sharded", [False, True], ids=["ddp", "fsdp"])
def test_an_iterable_dataset_steps_in_lockstep_and_one_of_unknown_length_is_evaluated(sharded):
    x, y = _tensors()
    model = _model()
    config = _config(loader=LoaderConfig(num_workers=2))
    options = {"strategy": FullyShardedDataParallel()} if sharded else {}
    steps, metrics = launch(
        _fit, RANKS, args=(model, (Stream(), Stream()), config), model=model, threads_per_process=1, **options
    )
    # 2 ranks x 2 workers: shards of 51, 51, 51, 50 samples; batches of 8 per worker: 7+7 on rank 0,
    # 7+7 on rank 1 -> 14 steps per epoch (the ranks agree step by step)
    assert steps == 2 * 14
    loss, accuracy = _single_process_metrics(model, x, y)
    assert metrics["val"]["loss"] == pytest.approx(loss, rel=1e-5)
    assert metrics["val"]["accuracy"] == pytest.approx(accuracy)


class Records(Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"features": self.x[i], "labels": self.y[i]}


class ComputesItsLoss(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU())
        self.head = nn.Linear(16, CLASSES)

    def forward(self, features, labels):
        logits = self.head(self.encoder(features))
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


def test_fsdp_trains_a_model_that_computes_its_own_loss_and_reports_exact_metrics():
    x, y = _tensors()
    model = ComputesItsLoss()
    data = (Records(x[:150], y[:150]), Records(x[150:], y[150:]))  # val: 53 samples, shards 27 and 26
    from torchmetrics.classification import MulticlassF1Score  # as a Lightning user brings it

    torchmetrics_f1 = MulticlassF1Score(num_classes=CLASSES, average="macro")
    extra = {"metrics": {"f1": F1(CLASSES), "torchmetrics_f1": torchmetrics_f1}}
    steps, metrics = launch(
        _fit,
        RANKS,
        args=(model, data, _config(epochs=2), extra),
        model=model,
        strategy=FullyShardedDataParallel(),
        threads_per_process=1,
    )
    assert steps == 2 * 10  # 75 per rank: 10 batches of 8
    with torch.no_grad():
        out = model(x[150:], y[150:])
    predicted = out["logits"].argmax(-1)
    assert metrics["val"]["loss"] == pytest.approx(out["loss"].item(), rel=1e-5)
    assert metrics["val"]["accuracy"] == pytest.approx((predicted == y[150:]).float().mean().item())
    assert metrics["val"]["f1"] == pytest.approx(f1_score(y[150:], predicted, average="macro"))
    assert metrics["val"]["torchmetrics_f1"] == pytest.approx(metrics["val"]["f1"])  # summed over both ranks


def test_namespace_splits_work_under_ddp():
    x, y = _tensors()
    model = _model()
    data = SimpleNamespace(train=TensorDataset(x, y), val=None)
    steps, metrics = launch(
        _fit, RANKS, args=(model, data, _config(epochs=1)), model=model, threads_per_process=1
    )
    assert steps == 13 and metrics == {}


def test_a_pipeline_refuses_batches_of_several_inputs_with_the_fix():
    from workbench.parallel import PipelineParallel, WorkerFailed

    x, y = _tensors()
    model = models.mlp(FEATURES, CLASSES, hidden=(16, 16))
    said = r"PipelineParallel sends one input tensor through its stages, but these batches hold 2 inputs"
    with pytest.raises(
        WorkerFailed, match=said + r" before the target \(\(x1, x2, \.\.\., target\)\); stack them"
    ):
        launch(_fit, RANKS, args=(model, TensorDataset(x, x, y), _config(epochs=1)), model=model,
               strategy=PipelineParallel(), threads_per_process=1)  # fmt: skip


class WithAuxiliaryHead(nn.Module):
    """A model whose auxiliary head the loss never reaches (DDP waits for its gradients forever)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body, self.head, self.aux = nn.Linear(FEATURES, 16), nn.Linear(16, CLASSES), nn.Linear(16, 1)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def test_parameters_without_a_gradient_under_ddp_are_named_and_the_printed_strategy_trains():
    """DDP's "Expected to have finished reduction in the prior iteration" (a page naming indices and a
    DistributedDataParallel keyword the user never passes) is one sentence naming the parameters; the
    strategy it prints trains the same model."""
    from workbench.parallel import DataParallel, WorkerFailed

    x, y = _tensors()
    data = (TensorDataset(x[:160], y[:160]), TensorDataset(x[160:], y[160:]))
    model = WithAuxiliaryHead()
    with pytest.raises(WorkerFailed) as failed:
        launch(_fit, RANKS, args=(model, data, _config(epochs=1)), model=model, threads_per_process=1)
    said = str(failed.value).splitlines()[0]
    assert re.match(
        r"rank [01] of 2 failed: ValueError: the model's parameters aux.weight, aux.bias got no gradient "
        r"from the last step's loss, and DDP all-reduces every parameter's gradient in each step: if they "
        r"serve on some steps only \(a branch, an auxiliary head\), give strategy=DataParallel\(",
        said,
    ), said
    printed = said.split("give strategy=")[1].split(";")[0]
    aux_before = model.aux.weight.detach().clone()
    steps, metrics = launch(
        _fit, RANKS, args=(model, data, _config(epochs=1)), model=model, threads_per_process=1,
        strategy=eval(printed, {"DataParallel": DataParallel}),
    )  # fmt: skip
    assert steps == 10 and metrics["val"]["accuracy"] > 0
    torch.testing.assert_close(model.aux.weight, aux_before)  # the head the loss never reached is unchanged


def test_the_names_torch_distributed_debug_detail_prints_are_read_too():
    from workbench.train.diagnose import explain_model_error

    error = RuntimeError(
        "Expected to have finished reduction in the prior iteration before starting a new one. ...\n"
        "Parameters which did not receive grad for rank 1: aux.bias, aux.weight"
    )
    said = explain_model_error(WithAuxiliaryHead(), torch.zeros(2, FEATURES), error)
    assert said.startswith("the model's parameters aux.bias, aux.weight got no gradient from the last step's")
