"""torchmetrics metrics given as they are (`metrics={"f1": MulticlassF1Score(...)}`), as a Lightning user
brings them: the Trainer reports what the metric gives over the whole split at once (its summed states added
over batches, and over ranks in tests/parallel/test_your_data_parallel.py); one whose states grow, one that
gives several numbers, a MetricCollection, a function of the wrong arity and scikit-learn's (y_true, y_pred)
functions are refused with the fix before
any step."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from workbench.train import TrainConfig, Trainer

torchmetrics = pytest.importorskip("torchmetrics", reason="torchmetrics comes with the peers extra")
from torchmetrics import classification, regression  # noqa: E402

GENERATOR = torch.Generator().manual_seed(0)
X = torch.randn(203, 6, generator=GENERATOR)
Y = (X[:, 0] > 0.3).long() + (X[:, 1] > 0.5).long()  # 3 classes, unbalanced
TRAIN, VAL = slice(0, 160), slice(160, 203)  # val: 43 samples, batches of 8 (the last one 3)
CONFIG = TrainConfig(epochs=2, batch_size=8, seed=1)


def _classification_metrics():
    return {
        "macro_accuracy": classification.MulticlassAccuracy(num_classes=3),  # its default: average="macro"
        "f1": classification.MulticlassF1Score(num_classes=3, average="macro"),
        "auroc": classification.MulticlassAUROC(num_classes=3, thresholds=50),
    }


def test_torchmetrics_report_what_they_give_on_the_whole_split_at_once():
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    data = (TensorDataset(X[TRAIN], Y[TRAIN]), TensorDataset(X[VAL], Y[VAL]))
    result = Trainer(model, F.cross_entropy, data, CONFIG, metrics=_classification_metrics()).fit()
    with torch.no_grad():
        logits = model(X[VAL])
    for name, metric in _classification_metrics().items():  # fresh ones, given the whole split in one update
        assert result.metrics["val"][name] == pytest.approx(float(metric(logits, Y[VAL])), rel=1e-6), name


def test_a_regression_metric_reads_the_outputs_against_float_targets():
    torch.manual_seed(0)
    x = torch.randn(90, 4, generator=GENERATOR)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0]]) + 0.1
    data = (TensorDataset(x[:60], y[:60]), TensorDataset(x[60:], y[60:]))
    model = nn.Linear(4, 1)
    metrics = {"mse": regression.MeanSquaredError(), "r2": regression.R2Score()}
    result = Trainer(model, F.mse_loss, data, TrainConfig(epochs=3, batch_size=7), metrics=metrics).fit()
    with torch.no_grad():
        predicted = model(x[60:])
    assert result.metrics["val"]["mse"] == pytest.approx(F.mse_loss(predicted, y[60:]).item(), rel=1e-5)
    assert result.metrics["val"]["r2"] == pytest.approx(
        float(regression.R2Score()(predicted, y[60:])), rel=1e-5
    )


@pytest.mark.parametrize(
    ("metric", "said"),
    [
        (
            lambda: classification.BinaryAUROC(),
            r"^metrics\['m'\] \(BinaryAUROC\) keeps its states preds, target with dist_reduce_fx=cat, not "
            r"'sum', so the Trainer cannot add them up over batches and ranks: give it thresholds=200 \(its "
            r"curve then sums in 200 bins\), or a function fn\(outputs, batch\) -> float$",
        ),
        (
            lambda: torchmetrics.MetricCollection([classification.MulticlassAccuracy(num_classes=3)]),
            r"^metrics\['m'\] is a MetricCollection: give its metrics one by one, each under its own name: "
            r"metrics=dict\(collection.items\(\)\)$",
        ),
        (
            lambda: lambda outputs: outputs.mean(),
            r"^metrics\['m'\] is <lambda>\(outputs\), and a metric function is called as "
            r"fn\(outputs, batch\)",
        ),
        (
            lambda: __import__("sklearn.metrics").metrics.f1_score,
            r"^metrics\['m'\] is scikit-learn's f1_score\(y_true, y_pred, ...\), and a metric function is "
            r"called as fn\(outputs, batch\): wrap it, lambda outputs, batch: f1_score\(batch\[-1\].cpu\(\), "
            r"outputs.argmax\(-1\).cpu\(\)\)\. .* for F1, precision or recall give "
            r"workbench.train.metrics.F1\(num_classes\) or a torchmetrics metric$",
        ),
    ],
    ids=["growing states", "collection", "one argument", "scikit-learn"],
)
def test_what_cannot_be_added_over_batches_is_refused_where_the_trainer_is_built(metric, said):
    with pytest.raises(TypeError, match=said):
        Trainer(nn.Linear(6, 3), F.cross_entropy, (TensorDataset(X, Y),) * 2, CONFIG, metrics={"m": metric()})


def test_a_metric_that_gives_one_number_per_class_is_refused_before_any_step():
    trainer = Trainer(
        nn.Linear(6, 3), F.cross_entropy, (TensorDataset(X, Y),) * 2, CONFIG,
        metrics={"recall": classification.MulticlassRecall(num_classes=3, average=None)},
    )  # fmt: skip
    with pytest.raises(
        ValueError,
        match=r"^metrics\['recall'\] failed on the first training batch, before any step .*: "
        r"metrics\['recall'\] \(MulticlassRecall\) computes a tensor of shape \(3,\); a metric gives one "
        r"number: ask it for one \(average='macro' or 'micro'\)",
    ):
        trainer.fit()
    assert trainer.step == 0


def test_the_wrapped_scikit_learn_function_the_refusal_prints_trains():
    from sklearn.metrics import accuracy_score

    with pytest.raises(TypeError, match=r"wrap it, lambda outputs, batch: ") as refused:
        Trainer(nn.Linear(6, 3), F.cross_entropy, (TensorDataset(X, Y),) * 2, CONFIG,
                metrics={"acc": accuracy_score})  # fmt: skip
    printed = re.search(r"wrap it, (lambda outputs, batch: .*?\)\))\. That", str(refused.value))[1]
    wrapped = eval(printed, {"accuracy_score": accuracy_score})  # pasted where the user imported it
    result = Trainer(
        nn.Linear(6, 3), F.cross_entropy, (TensorDataset(X, Y),) * 2, CONFIG, metrics={"acc": wrapped}
    ).fit()
    assert result.metrics["val"]["acc"] == pytest.approx(result.metrics["val"]["accuracy"])
