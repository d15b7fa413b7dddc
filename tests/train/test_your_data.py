"""Bring your own data and model on one device: every input kind trains, matches the in-memory path where
it should, and every wrong input is refused with a message that names it and says the fix."""

from __future__ import annotations

import json
import warnings
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import f1_score
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset, TensorDataset, random_split

from workbench import models
from workbench.data import Dataset as InMemory
from workbench.data import LoaderConfig, Splits, move_batch, torch_loader
from workbench.parallel.strategies.pipeline import PipelineParallel
from workbench.train import Callback, OptimizerConfig, TrainConfig, Trainer
from workbench.train.metrics import F1

N, FEATURES, CLASSES = 240, 6, 3


def _tensors(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(N, FEATURES, generator=generator)
    y = (x[:, 0] > 0.3).long() + (x[:, 1] > 0.5).long()  # 3 classes, learnable
    return x, y


def _model():
    torch.manual_seed(0)
    return models.mlp(FEATURES, CLASSES, hidden=(16,))


def _config(**changes):
    base = dict(epochs=2, batch_size=16, optimizer=OptimizerConfig("adam", lr=1e-2), log_every=1, seed=5)
    return TrainConfig(**{**base, **changes})


class Events(Callback):
    def __init__(self):
        self.steps, self.evals, self.info = [], [], None

    def on_fit_start(self, info):
        self.info = info

    def on_step(self, metrics):
        self.steps.append(metrics)

    def on_eval(self, metrics):
        self.evals.append(metrics)


def _parameters(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# ---------------------------------------------------------------------------- equivalence


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_tensor_dataset_trains_exactly_as_the_same_tensors_in_memory(accumulate):
    x, y = _tensors()
    train, val = slice(0, 200), slice(200, N)
    in_memory = Splits(
        InMemory("mine", x[train], y[train], "classification", CLASSES),
        InMemory("mine", x[val], y[val], "classification", CLASSES),
    )
    torch_data = Splits(TensorDataset(x[train], y[train]), val=TensorDataset(x[val], y[val]))
    results, params = [], []
    for data in (in_memory, torch_data):
        model = _model()
        results.append(Trainer(model, F.cross_entropy, data, _config(accumulate=accumulate)).fit())
        params.append(_parameters(model))
    torch.testing.assert_close(params[0], params[1], rtol=0, atol=0)
    assert results[0].metrics["val"]["accuracy"] == results[1].metrics["val"]["accuracy"]
    assert results[0].metrics["val"]["loss"] == pytest.approx(results[1].metrics["val"]["loss"], rel=1e-12)


# ---------------------------------------------------------------------------- input kinds


def _kinds():
    x, y = _tensors()
    data = TensorDataset(x, y)
    train, val, test = random_split(data, [160, 40, 40], generator=torch.Generator().manual_seed(0))
    return {
        "one torch dataset": data,
        "random_split tuple": (train, val, test),
        "list with None": [train, None, test],
        "dict": {"train": train, "val": val},
        "dict as Hugging Face names the splits": {"train": train, "validation": val, "test": test},
        "Splits of Subsets": Splits(Subset(data, range(200)), val=Subset(data, range(200, N))),
        "object with .train": SimpleNamespace(train=train, val=val),
        "DataLoader": DataLoader(data, batch_size=32, shuffle=True),
        "loaders per split": (DataLoader(train, batch_size=32), DataLoader(val, batch_size=40)),
    }


@pytest.mark.parametrize("kind", list(_kinds()))
def test_every_kind_of_user_data_trains_and_evaluates(kind):
    data = _kinds()[kind]
    events = Events()
    trainer = Trainer(_model(), F.cross_entropy, data, _config(epochs=3), callbacks=[events])
    result = trainer.fit()
    assert result.status == "finished" and result.step == trainer.total_steps == len(events.steps)
    assert events.steps[-1]["loss"] < events.steps[0]["loss"]
    splits_with_eval = {e["split"] for e in events.evals}
    expected = {
        "one torch dataset": set(),
        "random_split tuple": {"val", "test"},
        "list with None": {"test"},
        "dict": {"val"},
        "dict as Hugging Face names the splits": {"val", "test"},
        "Splits of Subsets": {"val"},
        "object with .train": {"val"},
        "DataLoader": set(),
        "loaders per split": {"val"},
    }[kind]
    assert splits_with_eval == expected
    for split in expected:  # integer targets and (B, classes) outputs: accuracy by default
        assert 0 <= result.metrics[split]["accuracy"] <= 1


def test_metrics_without_a_split_to_evaluate_them_are_said_where_the_trainer_is_built():
    x, y = _tensors()
    said = r"fit\(\) computes metrics \['f1'\] on the val and test splits, and splits has only train, so fit "
    with pytest.warns(UserWarning, match=said + r"will not report them: give \(train, val\)") as said:
        Trainer(_model(), F.cross_entropy, TensorDataset(x, y), _config(), metrics={"f1": F1(CLASSES)})
    assert said[0].filename == __file__  # the user's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Trainer(_model(), F.cross_entropy, (TensorDataset(x, y), None, TensorDataset(x, y)), _config(),
                metrics={"f1": F1(CLASSES)})  # fmt: skip


def test_a_dataloader_keeps_its_own_batch_size_and_collate_fn():
    x, y = _tensors()
    seen = []

    def collate(samples):
        seen.append(len(samples))
        return torch.stack([s[0] for s in samples]), torch.stack([s[1] for s in samples])

    loader = DataLoader(TensorDataset(x, y), batch_size=48, collate_fn=collate)
    trainer = Trainer(_model(), F.cross_entropy, loader, _config(epochs=1, batch_size=7))
    trainer.fit()
    assert trainer.total_steps == 5 and seen == [48] * 5


class LazyFiles(Dataset):
    """A dataset that builds each sample when asked (as one reading files would), with a dict sample."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return {"features": self.x[index], "labels": self.y[index], "name": f"sample-{index}"}


class ComputesItsLoss(nn.Module):
    """Like a Hugging Face model: takes **batch, returns an object with .loss and .logits."""

    def __init__(self):
        super().__init__()
        self.body = _model()

    def forward(self, features, labels=None, name=None):
        assert isinstance(name, list) and isinstance(name[0], str)  # non-tensors pass through untouched
        logits = self.body(features)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return SimpleNamespace(loss=loss, logits=logits)


def test_a_model_that_computes_its_own_loss_from_dict_batches_with_workers_and_metrics(tmp_path):
    x, y = _tensors()
    data = (LazyFiles(x[:200], y[:200]), LazyFiles(x[200:], y[200:]))

    def macro_f1_wrong_way(outputs, batch):  # a plain function: averaged over samples
        return float((outputs.logits.argmax(-1) == batch["labels"]).float().mean())

    config = _config(epochs=3, loader=LoaderConfig(num_workers=2))
    metrics = {"f1": F1(CLASSES), "mean_hit": macro_f1_wrong_way}
    model = ComputesItsLoss()
    trainer = Trainer(model, None, data, config, metrics=metrics, run="own-loss", runs_dir=tmp_path)
    result = trainer.fit()
    val = result.metrics["val"]
    assert set(val) == {"loss", "accuracy", "f1", "mean_hit"}
    assert val["mean_hit"] == pytest.approx(val["accuracy"])  # batch means weighted by samples: exact
    with torch.no_grad():
        predicted = model.body(x[200:]).argmax(-1)
    assert val["f1"] == pytest.approx(f1_score(y[200:], predicted, average="macro"))
    logged = [json.loads(line) for line in (tmp_path / "own-loss" / "metrics.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "eval" and "f1" in e for e in logged)


def test_step_fn_computes_the_loss_for_any_batch_structure():
    x, y = _tensors()
    nested = [{"inputs": {"x": x[i]}, "target": y[i]} for i in range(N)]

    def step_fn(model, batch):
        outputs = model(batch["inputs"]["x"])
        return F.cross_entropy(outputs, batch["target"]), outputs

    def hit_rate(outputs, batch):
        return (outputs.argmax(-1) == batch["target"]).float().mean()

    class ListDataset(Dataset):
        def __len__(self):
            return len(nested)

        def __getitem__(self, i):
            return nested[i]

    result = Trainer(
        _model(),
        None,
        (ListDataset(), ListDataset()),
        _config(epochs=2),
        step_fn=step_fn,
        metrics={"hit_rate": hit_rate},
    ).fit()
    val = result.metrics["val"]
    # class scores against the batch's integer "target": accuracy is added, and agrees with hit_rate
    assert set(val) == {"loss", "accuracy", "hit_rate"}
    assert val["hit_rate"] == pytest.approx(val["accuracy"])


class Stream(IterableDataset):
    """Samples 0..n-1 with a label each; no __len__ unless sized."""

    def __init__(self, n, sized=False):
        self.n, self.sized = n, sized

    def __iter__(self):
        x, y = _tensors()
        for i in range(self.n):
            yield x[i], y[i], i

    def __len__(self):
        if not self.sized:
            raise TypeError("no length")
        return self.n


class _TwoInputs(nn.Module):
    """Features and a category index, as tabular models take them: ``forward(x, category)``."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(4, 3)
        self.net = nn.Sequential(nn.Linear(FEATURES + 3, 16), nn.ReLU(), nn.Linear(16, CLASSES))

    def forward(self, x, category):
        return self.net(torch.cat([x, self.embed(category)], dim=1))


def test_batches_of_several_inputs_go_to_the_model_as_its_arguments():
    """``(x, category, y)`` batches with a loss_fn: ``loss_fn(model(x, category), y)``; refused before."""
    x, y = _tensors()
    category = torch.arange(N) % 4
    train, val = (
        TensorDataset(x[:200], category[:200], y[:200]),
        TensorDataset(x[200:], category[200:], y[200:]),
    )
    torch.manual_seed(0)
    model = _TwoInputs()
    result = Trainer(
        model, F.cross_entropy, (train, val), _config(epochs=3), metrics={"f1": F1(CLASSES)}
    ).fit()
    with torch.no_grad():
        logits = model(x[200:], category[200:])
    val_metrics = result.metrics["val"]
    assert val_metrics["loss"] == pytest.approx(F.cross_entropy(logits, y[200:]).item(), rel=1e-5)
    assert val_metrics["accuracy"] == pytest.approx((logits.argmax(1) == y[200:]).float().mean().item())
    assert val_metrics["accuracy"] > 0.6 and "f1" in val_metrics


def test_an_iterable_dataset_without_length_trains_with_an_unknown_total():
    events = Events()

    def step_fn(model, batch):
        x, y, _ = batch
        return F.cross_entropy(model(x), y)

    trainer = Trainer(_model(), None, Stream(N), _config(epochs=2), step_fn=step_fn, callbacks=[events])
    assert trainer.total_steps is None and trainer.steps_per_epoch is None
    result = trainer.fit()
    assert events.info["total_steps"] is None
    assert result.step == 2 * 15 and events.steps[-1]["step"] == 30  # the epoch's last step is logged


@pytest.mark.parametrize("world_size, workers", [(1, 2), (2, 2), (2, 1), (3, 2)])
def test_an_iterable_dataset_is_sharded_over_ranks_and_workers_each_sample_once(world_size, workers):
    seen = []
    for rank in range(world_size):
        loader = torch_loader(
            Stream(101, sized=True),
            8,
            rank=rank,
            world_size=world_size,
            train=False,
            config=LoaderConfig(num_workers=workers),
        )
        batches = list(loader)
        assert len(batches) == loader.length
        seen += [int(i) for _, _, index in batches for i in index]
    assert sorted(seen) == list(range(101))


def test_nested_batches_move_tensors_and_leave_the_rest():
    batch = {"a": (torch.ones(2), "text", 3), "b": [torch.zeros(2, 2), None]}
    moved = move_batch(batch, torch.device("meta"))
    assert moved["a"][0].device.type == "meta" and moved["a"][1:] == ("text", 3)
    assert moved["b"][0].device.type == "meta" and moved["b"][1] is None


def test_f1_from_sums_over_parts_equals_f1_of_the_whole():
    generator = torch.Generator().manual_seed(1)
    logits, targets = torch.randn(90, 4, generator=generator), torch.randint(0, 4, (90,), generator=generator)
    metric = F1(4)
    parts = [metric.sums(logits[i : i + 25], (None, targets[i : i + 25])) for i in range(0, 90, 25)]
    whole = f1_score(targets, logits.argmax(-1), average="macro")
    assert metric.compute(torch.stack(parts).sum(0)) == pytest.approx(whole)


# ---------------------------------------------------------------------------- refusals


def _table(x, y):
    """The tensors as the table a user read from a CSV file: one column per feature and a label column."""
    import pandas as pd

    table = pd.DataFrame(x.numpy(), columns=[f"f{i}" for i in range(x.shape[1])])
    table["label"] = y.numpy()
    return table


def _refusals():
    x, y = _tensors()
    data = TensorDataset(x, y)
    float_data = TensorDataset(x, y.float())
    return {
        "output (B,1) vs float target (B,)": (
            dict(model=models.mlp(FEATURES, 1), loss_fn=F.mse_loss, splits=float_data),
            ValueError,
            r"outputs of shape \(16, 1\) and targets of shape \(16,\): they broadcast to \(16, 16\)"
            r".*y\.unsqueeze\(1\)",
        ),
        "float targets for cross_entropy": (
            dict(loss_fn=F.cross_entropy, splits=float_data),
            ValueError,
            r"outputs of shape \(16, 3\) and targets of shape \(16,\).*y\.long\(\)",
        ),
        "loss not reduced": (
            dict(loss_fn=lambda o, t: F.cross_entropy(o, t, reduction="none"), splits=data),
            ValueError,
            r"loss_fn returned a loss of shape \(16,\), not a scalar.*reduction='mean'",
        ),
        "loss as a float": (
            dict(loss_fn=lambda o, t: F.cross_entropy(o, t).item(), splits=data),
            TypeError,
            r"loss_fn returned a loss of type float; it must be a scalar tensor.*\.item\(\)",
        ),
        "loss detached": (
            dict(loss_fn=lambda o, t: F.cross_entropy(o, t).detach(), splits=data),
            ValueError,
            r"does not require grad.*\.detach\(\)",
        ),
        "model does not take the batch": (
            dict(loss_fn=None, splits=data),
            TypeError,
            r"called as model\(\*batch\) with \[\(16, 6\) float32, \(16,\) int64\], but Sequential\.forward"
            r"\(input\).*give loss_fn\(outputs, target\)",
        ),
        "model returns no loss": (
            dict(loss_fn=None, splits=TensorDataset(x)),
            ValueError,
            r"the model returned a tensor of shape \(16, 3\), not a scalar loss.*give loss_fn\(outputs",
        ),
        "dict batches with loss_fn": (
            dict(loss_fn=F.cross_entropy, splits=LazyFiles(x, y)),
            TypeError,
            r"batches must be \(inputs, target\) or \(input1, input2, \.\.\., target\); this batch is "
            r"dict\(features: \(16, 6\)",
        ),
        "tensors as splits": (
            dict(splits=(x, y)),
            TypeError,
            r"got a tuple of \(Tensor, Tensor\).*TensorDataset\(x, y\)",
        ),
        "arrays as splits": (
            dict(splits=(x.numpy(), y.numpy())),
            TypeError,
            r"got a tuple of \(ndarray \(240, 6\), ndarray \(240,\)\), read as \(train, val\).*"
            r"TensorDataset\(torch\.as_tensor\(x\), torch\.as_tensor\(y\)\)",
        ),
        "arrays as splits, the targets a column": (  # regression targets of shape (N, 1)
            dict(splits=(x.numpy(), y.numpy()[:, None])),
            TypeError,
            r"got a tuple of \(ndarray \(240, 6\), ndarray \(240, 1\)\), read as \(train, val\).*",
        ),
        "a pair of tensors as a dict's split": (
            dict(splits={"train": (x, y), "val": data}),
            TypeError,
            r"splits\.train must be a dataset .*; got a tuple of \(Tensor \(240, 6\), Tensor \(240,\)\)\. "
            r"Arrays of features and targets: wrap them as torch\.utils\.data\.TensorDataset",
        ),
        "a list of samples as splits": (
            dict(splits=[(x[i], y[i]) for i in range(len(x))]),
            TypeError,
            r"got a list of \(tuple, tuple, tuple, tuple\)\. A list of 240 samples is one dataset: stack",
        ),
        "a number as splits": (dict(splits=3), TypeError, r"splits must be a workbench Dataset.*got int"),
        "a pandas DataFrame as splits": (
            dict(splits=_table(x, y)),
            TypeError,
            r"^splits is a pandas DataFrame \(240, 7\), whose \[\] picks columns, not samples: make "
            r"tensors of its features and targets, TensorDataset\(torch\.tensor\(df\[features\]",
        ),
        "DataFrames as (train, val)": (
            dict(splits=(_table(x, y), _table(x, y))),
            TypeError,
            r"got a tuple of \(DataFrame, DataFrame\)\. Each split is a pandas DataFrame \(240, 7\), whose",
        ),
        "a DataFrame as a dict's split": (
            dict(splits={"train": _table(x, y)}),
            TypeError,
            r"splits\.train must be a dataset .*; got a pandas DataFrame \(240, 7\), whose \[\] picks",
        ),
        "a generator as splits": (
            dict(splits=(pair for pair in zip(x, y, strict=True))),
            TypeError,
            r"got a generator, which can be read only once\. Wrap the code that makes it in an IterableData",
        ),
        "a dict without train": (
            dict(splits={"val": data}),
            TypeError,
            r"splits as a dict with the keys \['val'\] has no 'train' \(or 'training'\) split",
        ),
        "a dict with a misspelt split": (
            dict(splits={"train": data, "vaild": data}),
            TypeError,
            r"'vaild' is no split \(did you mean 'valid'\?\); the splits are 'train' \(needed\)",
        ),
        "a model as the data": (
            dict(splits=nn.Linear(2, 2)),
            TypeError,
            r"^splits is a model \(Linear\), not data: give a workbench Dataset",
        ),
        "a dict with val twice": (
            dict(splits={"train": data, "val": data, "validation": data}),
            TypeError,
            r"splits names the val split twice: \['train', 'val', 'validation'\]; keep one",
        ),
        "empty torch split": (
            dict(splits=TensorDataset(x[:0], y[:0])),
            ValueError,
            r"splits\.train is empty",
        ),
        "model not a module": (
            dict(model=lambda v: v),
            TypeError,
            r"model must be a torch\.nn\.Module, got function",
        ),
        "config as dict": (
            dict(config={"epochs": 1}),
            TypeError,
            r"config must be a TrainConfig.*TrainConfig\(\*\*that_dict\)",
        ),
        "val split where the config goes": (
            dict(config=TensorDataset(x[:8], y[:8])),
            TypeError,
            r"config must be a TrainConfig or None, got TensorDataset: the splits go together, as the third "
            r"argument: Trainer\(model, loss_fn, \(train, val\), config\)",
        ),
        "strategy class": (
            dict(strategy=PipelineParallel),
            TypeError,
            r"strategy must be a strategy object.*not the class",
        ),
        "callbacks not a list": (
            dict(callbacks=Events),
            TypeError,
            r"callbacks must be a list of callbacks",
        ),
        "callback without hooks": (
            dict(callbacks=[print]),
            TypeError,
            r"callbacks\[0\] is a builtin_function_or_method",
        ),
        "optimizer as instance": (
            dict(optimizer_factory="adam"),
            TypeError,
            r"optimizer_factory must be a function",
        ),
        "loss_fn and step_fn": (
            dict(step_fn=lambda m, b: 0),
            ValueError,
            r"give loss_fn or step_fn, not both",
        ),
        "loss_fn not callable": (dict(loss_fn="mse"), TypeError, r"loss_fn must be a function.*got str"),
        "metrics not a dict": (
            dict(metrics=[F1(3)]),
            TypeError,
            r"metrics must be a dict of name -> fn",
        ),
        "metric not callable": (
            dict(metrics={"f1": 0.5}),
            TypeError,
            r"metrics\['f1'\] must be a function",
        ),
        "cosine without a length": (
            dict(
                loss_fn=None,
                step_fn=lambda m, b: F.cross_entropy(m(b[0]), b[1]),
                splits=Stream(N),
                config=_config(optimizer=OptimizerConfig("adam", schedule="cosine")),
            ),
            ValueError,
            r"schedule='cosine' needs the number of steps.*__len__",
        ),
    }


@pytest.mark.parametrize("case", list(_refusals()))
def test_wrong_input_is_refused_before_any_update_with_the_fix(case):
    x, y = _tensors()
    arguments, error, message = _refusals()[case]
    arguments = {
        "model": _model(),
        "loss_fn": F.cross_entropy,
        "splits": TensorDataset(x, y),
        "config": _config(epochs=1),
        **arguments,
    }
    model = arguments["model"]
    before = _parameters(model) if isinstance(model, nn.Module) else None
    with pytest.raises(error, match=message):
        Trainer(
            arguments.pop("model"),
            arguments.pop("loss_fn"),
            arguments.pop("splits"),
            arguments.pop("config"),
            **arguments,
        ).fit()
    if before is not None:
        torch.testing.assert_close(_parameters(model), before, rtol=0, atol=0)  # nothing was updated


class _Samples(Dataset):
    """64 samples that torch's default collate_fn cannot batch: PIL images, tensors of growing length, or a
    dict holding an object."""

    def __init__(self, kind):
        self.kind = kind

    def __len__(self):
        return 64

    def __getitem__(self, index):
        if self.kind == "images":
            from PIL import Image

            return Image.new("L", (8, 8)), index % 3
        if self.kind == "ragged":
            return torch.zeros(index + 1), index % 3
        return {"x": torch.zeros(FEATURES), "y": index % 3, "note": object()}


@pytest.mark.parametrize(
    ("kind", "workers", "said"),
    [
        ("images", 0, r"the dataset's samples hold PIL images \(\(Image, int\) each\), which torch cannot "
                      r"put in a batch: convert each to a tensor in the dataset \(torchvision's transforms"),
        ("images", 2, r"the dataset's samples hold PIL images"),  # raised in a worker process
        ("ragged", 0, r"the dataset's samples differ in shape \(stack expects each tensor to be equal "
                      r"size, but got \[\d+\] at entry 0 and \[\d+\] at entry 1\): .*rnn\.pad_sequence"),
        ("object", 0, r"torch's default collate_fn cannot put the dataset's samples \(dict\(x: \(6,\) "
                      r"float32, y: int, note: object\) each\) in a batch \(default_collate: batch must"),
    ],
)  # fmt: skip
def test_samples_torch_cannot_batch_are_said_with_the_fix(kind, workers, said):
    """torch's "default_collate: batch must contain tensors ... found <class 'PIL.Image.Image'>" or "stack
    expects each tensor to be equal size", from deep inside the DataLoader, came through as they were."""
    if kind == "images":
        pytest.importorskip("PIL")
    config = _config(loader=LoaderConfig(num_workers=workers))
    with pytest.raises(ValueError, match=said):
        Trainer(_model(), F.cross_entropy if kind != "object" else None, _Samples(kind), config).fit()


def test_an_error_of_the_users_own_dataset_passes_untouched():
    class Broken(_Samples):
        def __getitem__(self, index):
            raise TypeError("my own bug")

    with pytest.raises(TypeError, match=r"^my own bug$"):
        Trainer(_model(), F.cross_entropy, Broken("ragged"), _config()).fit()


def test_a_pipeline_refuses_a_model_that_computes_its_own_loss():
    from workbench.train.objective import Objective

    with pytest.raises(ValueError, match=r"PipelineParallel needs loss_fn.*the model cannot compute it"):
        PipelineParallel().check_objective(Objective(None))


def test_a_dataloader_with_its_own_sampler_is_refused_under_data_parallel():
    x, y = _tensors()
    sampler = torch.utils.data.WeightedRandomSampler(torch.ones(N), N)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, sampler=sampler)
    with pytest.raises(
        ValueError, match=r"custom sampler \(WeightedRandomSampler\).*Give the dataset itself"
    ):
        torch_loader(loader, 8, rank=0, world_size=2)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(num_workers=-1), r"num_workers must be"),
        (dict(prefetch_factor=2), r"prefetch_factor=2 needs num_workers ≥ 1"),
        (dict(persistent_workers=True), r"persistent_workers=True needs num_workers ≥ 1"),
        (dict(pin_memory="yes"), r"pin_memory must be True, False or None"),
        (dict(collate_fn="stack"), r"collate_fn must be a function"),
    ],
)
def test_loader_options_are_validated(options, message):
    with pytest.raises(ValueError, match=message):
        LoaderConfig(**options)


def test_loader_defaults_follow_the_device():
    assert LoaderConfig().options("cpu", map_style=True)["pin_memory"] is False
    assert LoaderConfig().options("cuda", map_style=True)["pin_memory"] is True
    assert LoaderConfig(num_workers=2).options("cpu", map_style=True)["persistent_workers"] is True
    assert LoaderConfig(num_workers=2).options("cpu", map_style=False)["persistent_workers"] is False


def test_a_tensor_dataset_on_cuda_loads_in_the_training_process(monkeypatch):
    """Its samples are in memory: workers would only pickle each batch through shared memory (on an H100 the
    Trainer ran 2.25× a hand loop with 4 per loader); so are random_split's parts of it (Subsets, nested
    too). Another map-style dataset still gets workers."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    tensors = TensorDataset(torch.zeros(8, 3), torch.zeros(8))
    parts = random_split(Subset(tensors, range(6)), [4, 2], generator=torch.Generator().manual_seed(0))
    for in_memory in (tensors, Subset(tensors, range(8)), parts[0]):
        assert torch_loader(in_memory, 4, device_type="cuda").loader.num_workers == 0
    other = [(torch.zeros(3), 0.0)] * 8  # a list of samples: map-style, rows built one by one
    assert torch_loader(other, 4, device_type="cuda").loader.num_workers == 4


def test_loader_workers_start_after_the_parent_used_four_torch_threads():
    """As on a 16-core laptop: the parent's OpenMP pool exists before DataLoader workers fork (they run
    single-threaded, so they do not hang); run in a fresh interpreter with a deadline."""
    import subprocess
    import sys

    script = """
import torch, torch.nn.functional as F
from torch.utils.data import TensorDataset
from workbench.data import LoaderConfig
from workbench.train import OptimizerConfig, TrainConfig, Trainer
torch.set_num_threads(4)
a = torch.randn(800, 800)
[a @ a for _ in range(5)]
x = torch.randn(2000, 32)
y = (x[:, 0] > 0).long()
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
config = TrainConfig(epochs=2, batch_size=64, optimizer=OptimizerConfig("adam", lr=1e-2),
                     loader=LoaderConfig(num_workers=2))
result = Trainer(model, F.cross_entropy, (TensorDataset(x, y), TensorDataset(x[:200], y[:200])), config).fit()
print(result.status, result.step, result.metrics["val"]["accuracy"] > 0.9)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["finished", "64", "True"]
