"""A torchmetrics ``Metric`` as the Trainer's sums: its states after one batch's ``update`` are the batch's
sums, the totals over batches and ranks are set back as its states, and its own ``compute`` gives the number.
Exact across ranks, as torchmetrics' own sync is, for every metric whose states all add
(``dist_reduce_fx="sum"``: accuracy, precision, recall, F1, MSE, R², binned AUROC...).

torchmetrics is not a dependency: these run only on a metric of yours, so it is imported already.

    >>> import torch
    >>> from torchmetrics.classification import MulticlassAccuracy
    >>> metric = SummedStates("acc", MulticlassAccuracy(num_classes=2, average="micro"))
    >>> first = metric.sums(torch.tensor([[2.0, 0.0], [0.0, 1.0]]), (None, torch.tensor([0, 0])))
    >>> second = metric.sums(torch.tensor([[0.0, 3.0]]), (None, torch.tensor([1])))
    >>> round(metric.compute(first + second), 4)  # 2 of 3 right, as one update of all three would give
    0.6667
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import torch

from workbench.train.predictions import logits_of, targets_of


def is_torchmetrics(metric: Any) -> bool:
    """True for a ``torchmetrics.Metric`` (without importing torchmetrics when it is not in use)."""
    torchmetrics = sys.modules.get("torchmetrics")
    return torchmetrics is not None and isinstance(metric, torchmetrics.Metric)


def is_torchmetrics_collection(metric: Any) -> bool:
    torchmetrics = sys.modules.get("torchmetrics")
    return torchmetrics is not None and isinstance(metric, torchmetrics.MetricCollection)


class SummedStates:
    """`metric`'s summed states as the Trainer's sums; TypeError naming the states that do not add."""

    def __init__(self, name: str, metric: Any) -> None:
        reductions = getattr(metric, "_reductions", None)  # torchmetrics' dist_reduce_fx per state
        if not isinstance(reductions, dict) or not reductions:
            raise TypeError(f"metrics[{name!r}] ({type(metric).__name__}) has no states this version reads")
        growing = [state for state, reduce in reductions.items() if _name_of(reduce) != "sum"]
        if growing:
            binned = "thresholds=200 (its curve then sums in 200 bins), " if _takes_thresholds(metric) else ""
            raise TypeError(
                f"metrics[{name!r}] ({type(metric).__name__}) keeps its states {', '.join(growing)} with "
                f"dist_reduce_fx={'/'.join(sorted({_name_of(reductions[state]) for state in growing}))}, not "
                "'sum', so the Trainer cannot add them up over batches and ranks: give it "
                f"{binned}or a function fn(outputs, batch) -> float"
            )
        self.name, self.metric, self.states = name, metric, list(reductions)
        self.layout: list[tuple[str, torch.Size, torch.dtype]] | None = None

    def sums(self, outputs: Any, batch: Any) -> torch.Tensor:
        predictions, targets = logits_of(outputs), targets_of(batch)
        if predictions is None or targets is None:
            missing = "the outputs hold no tensor of predictions" if predictions is None else "no targets"
            raise ValueError(
                f"{type(self.metric).__name__} is updated with (predictions, targets), and {missing} "
                "(outputs: a tensor, .logits or ['logits']; batch: (..., targets) or a dict with 'labels', "
                "'targets' or 'y'); give a function fn(outputs, batch) -> float instead"
            )
        metric = self._on(predictions.device)
        metric.reset()
        metric.update(predictions, targets)
        values = [getattr(metric, state) for state in self.states]
        first = self.layout is None
        self.layout = [(state, v.shape, v.dtype) for state, v in zip(self.states, values, strict=True)]
        sums = torch.cat([value.detach().reshape(-1).to(torch.float64) for value in values])
        if first:  # one number? said at the first batch (the Trainer's check), not at the end of an epoch
            self.compute(sums)
        return sums

    def compute(self, totals: torch.Tensor) -> float:
        metric = self._on(totals.device)
        metric.reset()  # the states' defaults: their layout, on a rank that has not seen a batch
        layout = self.layout or [(s, getattr(metric, s).shape, getattr(metric, s).dtype) for s in self.states]
        parts = totals.split([shape.numel() for _, shape, _ in layout])
        for (state, shape, dtype), value in zip(layout, parts, strict=True):
            setattr(metric, state, value.reshape(shape).to(dtype))
        value = type(metric).compute(metric)  # the class's own compute: no sync (the totals are every rank's)
        metric.reset()
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            shown = f"a tensor of shape {tuple(value.shape)}" if hasattr(value, "shape") else repr(value)
            raise ValueError(
                f"metrics[{self.name!r}] ({type(metric).__name__}) computes {shown:.80}; a metric gives one "
                "number: ask it for one (average='macro' or 'micro'), or give each number a name of its own"
            )
        return float(value)

    def _on(self, device: torch.device) -> Any:
        state = getattr(self.metric, self.states[0])
        if state.device != device:
            self.metric = self.metric.to(device)
        return self.metric

    def __repr__(self) -> str:
        return repr(self.metric)


def _name_of(reduce: Any) -> str:
    """torchmetrics' name for a state's reduction: 'cat' for its dim_zero_cat, None for none."""
    name = getattr(reduce, "__name__", None)
    return name.removeprefix("dim_zero_") if isinstance(name, str) else repr(reduce)


def _takes_thresholds(metric: Any) -> bool:
    try:
        return "thresholds" in inspect.signature(type(metric)).parameters
    except (TypeError, ValueError):
        return False
