"""Evaluation metrics that stay exact across ranks: each batch gives sums, the sums add up over batches and
ranks, and the metric is computed once from the totals (never an average of averages).

A metric is either a plain function ``fn(outputs, batch) -> float`` (a per-sample mean such as accuracy:
weighted by the batch's samples) or an object with ``sums(outputs, batch) -> 1-D tensor`` and
``compute(totals) -> float`` for metrics that are not means (F1 needs true/false positives per class).

    >>> import torch
    >>> outputs, batch = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]]), (None, torch.tensor([0, 1, 1]))
    >>> round(Accuracy().compute(Accuracy().sums(outputs, batch)), 3)
    0.667
    >>> F1(num_classes=2).compute(F1(num_classes=2).sums(outputs, batch))
    0.6666666666666666
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from workbench._validate import refuse_class
from workbench.train import summed_states
from workbench.train.predictions import logits_of, targets_of


class MetricError(ValueError):
    """A metric raised or returned something else than a number; the message names it."""


@runtime_checkable
class Metric(Protocol):
    """A metric computed from sums that add over batches and ranks: `sums` gives a batch's (float64, so
    that ranks add exactly), `compute` the value from their totals.

    Example (the mean confidence of the predicted class):
        >>> import torch, torch.nn.functional as F
        >>> from torch.utils.data import TensorDataset
        >>> from workbench.train import TrainConfig, Trainer
        >>> class Confidence:
        ...     def sums(self, outputs, batch):
        ...         top = outputs.softmax(dim=-1).max(dim=-1).values.double()
        ...         return torch.stack([top.sum(), top.new_tensor(len(top))])
        ...     def compute(self, totals):
        ...         return float(totals[0] / totals[1])
        >>> data = TensorDataset(torch.randn(64, 3), torch.arange(64) % 2)
        >>> trainer = Trainer(torch.nn.Linear(3, 2), F.cross_entropy, (data, data), TrainConfig(epochs=1),
        ...                   metrics={"confidence": Confidence()}, progress=False)
        >>> sorted(trainer.fit().metrics["val"])
        ['accuracy', 'confidence', 'loss']
    """

    def sums(self, outputs: Any, batch: Any) -> torch.Tensor: ...

    def compute(self, totals: torch.Tensor) -> float: ...


class Accuracy:
    """Share of correct argmax predictions (per sample, or per token for ``(B, T)`` targets)."""

    def sums(self, outputs: Any, batch: Any) -> torch.Tensor:
        logits, targets = logits_of(outputs), targets_of(batch)
        correct = (logits.argmax(dim=-1) == targets).sum().to(torch.float64)
        return torch.stack([correct, correct.new_tensor(targets.numel())])

    def compute(self, totals: torch.Tensor) -> float:
        return float(totals[0] / totals[1]) if totals[1] > 0 else float("nan")

    def __repr__(self) -> str:
        return "Accuracy()"


class F1:
    """Macro F1 over `num_classes` classes, from per-class true positives, false positives and false
    negatives summed over every batch and rank.

    Args:
        num_classes: number of classes, ≥ 2.
    """

    def __init__(self, num_classes: int) -> None:
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"num_classes must be an integer ≥ 2, got {num_classes!r}")
        self.num_classes = num_classes

    def sums(self, outputs: Any, batch: Any) -> torch.Tensor:
        logits = logits_of(outputs)
        classes = self.num_classes
        if logits.shape[-1] != classes:
            raise ValueError(
                f"{self!r} got outputs with {logits.shape[-1]} class scores per sample (outputs "
                f"{tuple(logits.shape)}): give F1(num_classes={logits.shape[-1]})"
            )
        predicted = logits.argmax(dim=-1).flatten()
        targets = targets_of(batch).flatten()
        target_count = torch.bincount(targets, minlength=classes)  # its length: the largest class + 1
        if target_count.numel() > classes:
            raise ValueError(
                f"{self!r} got target class {target_count.numel() - 1}, outside 0..{classes - 1}: give "
                f"F1(num_classes={target_count.numel()}) or map the labels to 0..{classes - 1}"
            )
        true_positive = torch.bincount(targets[predicted == targets], minlength=classes)
        predicted_count = torch.bincount(predicted, minlength=classes)
        false_positive = predicted_count - true_positive
        false_negative = target_count - true_positive
        return torch.cat([true_positive, false_positive, false_negative]).to(torch.float64)

    def compute(self, totals: torch.Tensor) -> float:
        tp, fp, fn = totals.view(3, self.num_classes)
        denominator = 2 * tp + fp + fn
        present = denominator > 0
        if not present.any():
            return float("nan")
        return float((2 * tp[present] / denominator[present]).mean())

    def __repr__(self) -> str:
        return f"F1(num_classes={self.num_classes})"


class MeanOverSamples:
    """A plain ``fn(outputs, batch) -> number`` made exact across batches and ranks: Σ value·samples / Σ
    samples."""

    def __init__(self, fn: Callable[[Any, Any], Any], samples_of: Callable[[Any], int]) -> None:
        self.fn, self.samples_of = fn, samples_of

    def sums(self, outputs: Any, batch: Any) -> torch.Tensor:
        value = self.fn(outputs, batch)
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.detach().to(torch.float64).reshape(())
        elif (
            isinstance(value, numbers.Real | np.ndarray)
            and not isinstance(value, bool)
            and np.size(value) == 1
        ):
            value = torch.tensor(
                float(np.asarray(value).reshape(())), dtype=torch.float64
            )  # Python and NumPy numbers
        else:
            shown = f"an array of shape {tuple(value.shape)}" if hasattr(value, "shape") else repr(value)
            raise ValueError(
                f"returned {shown:.80}; a metric function returns one number for the batch (a float or a "
                "one-element tensor), e.g. (outputs.argmax(1) == y).float().mean()"
            )
        samples = self.samples_of(batch)
        return torch.stack([value * samples, torch.full_like(value, samples)])

    def compute(self, totals: torch.Tensor) -> float:
        return float(totals[0] / totals[1]) if totals[1] > 0 else float("nan")


def as_metric(name: str, metric: Any, samples_of: Callable[[Any], int]) -> Metric:
    """`metric` as a `Metric`; TypeError naming it when it is neither a function nor a Metric."""
    # a class passes both checks below, then fails at its first call
    refuse_class(f"metrics[{name!r}]", metric, "give an instance, e.g. {name}(...)")
    if summed_states.is_torchmetrics(metric):
        return summed_states.SummedStates(name, metric)
    if summed_states.is_torchmetrics_collection(metric):
        raise TypeError(
            f"metrics[{name!r}] is a MetricCollection: give its metrics one by one, each under its own name: "
            "metrics=dict(collection.items())"
        )
    if isinstance(metric, Metric):
        return metric
    if callable(metric):
        _check_arguments(name, metric)
        return MeanOverSamples(metric, samples_of)
    raise TypeError(
        f"metrics[{name!r}] must be a function (outputs, batch) -> float, or an object with "
        f"sums(outputs, batch) and compute(totals) (e.g. workbench.train.metrics.F1); got "
        f"{type(metric).__name__}"
    )


def _check_arguments(name: str, fn: Callable[..., Any]) -> None:
    """TypeError naming `fn`'s parameters when it cannot be called as ``fn(outputs, batch)``."""
    module = getattr(fn, "__module__", None) or ""  # None for a lambda made by exec or eval
    if module.startswith("sklearn.metrics"):  # (y_true, y_pred): labels, not a batch
        raise TypeError(
            f"metrics[{name!r}] is scikit-learn's {fn.__name__}(y_true, y_pred, ...), and a metric "
            "function is called as fn(outputs, batch): wrap it, lambda outputs, batch: "
            f"{fn.__name__}(batch[-1].cpu(), outputs.argmax(-1).cpu()). That averages over batches by their "
            "samples, exact for accuracy; for F1, precision or recall give workbench.train.metrics.F1("
            "num_classes) or a torchmetrics metric"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: its first call says
        return
    try:
        signature.bind(None, None)
    except TypeError:
        shown = getattr(fn, "__name__", type(fn).__name__)
        raise TypeError(
            f"metrics[{name!r}] is {shown}{signature}, and a metric function is called as "
            "fn(outputs, batch): the model's outputs and the whole batch, e.g. lambda outputs, batch: "
            "(outputs.argmax(1) == batch[1]).float().mean()"
        ) from None
