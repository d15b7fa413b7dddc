"""What a fit trains, as its log records it: the model (class, parameter count, a digest of its layers) and
the samples in each split (`workbench.data.Splits.sizes`). `workbench runs --diff` and the runs browser
tell runs apart by them where the configs are equal (a wider layer, another activation, more data).
Imports no torch: `workbench runs` reads runs fast.

Example (any object with ``parameters()`` and a repr; a torch module in practice):
    >>> import torch
    >>> model_text(summarize_model(torch.nn.Linear(10, 64)))
    'Linear, 704 parameters (#08eb67ca)'
    >>> trained_text(trained_what(torch.nn.Linear(10, 64), {"train": 1437, "val": 180, "test": None}))
    'Linear, 704 parameters, on 1,437 training samples'
    >>> relu, tanh = (torch.nn.Sequential(torch.nn.Linear(4, 4), f()) for f in (torch.nn.ReLU, torch.nn.Tanh))
    >>> summarize_model(relu)["digest"] != summarize_model(tanh)["digest"]  # the same parameters
    True
    >>> model_text(summarize_model(torch.nn.LazyLinear(3))).split(" (#")[0]  # before its first forward
    'LazyLinear, lazy parameters'
    >>> class Apply(torch.nn.Module):  # a layer whose repr shows a function, at an address per process
    ...     def __init__(self, fn):
    ...         super().__init__()
    ...         self.fn = fn
    ...     def extra_repr(self):
    ...         return repr(self.fn)
    >>> first, second = Apply(lambda x: x), Apply(lambda x: x)  # two addresses
    >>> summarize_model(first)["digest"] == summarize_model(second)["digest"]
    True
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, TypedDict

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # "<function <lambda> at 0x7f…>"


class ModelSummary(TypedDict):
    """The model a fit trains, as given to the Trainer (before a strategy wraps or shards it)."""

    name: str  # its class, e.g. "Sequential"
    parameters: int | None  # its parameters' elements, all of them (None: lazy ones not yet initialised)
    digest: str  # 8 hex digits of its repr: the same layers, sizes and activations give the same digest


class TrainedWhat(TypedDict):
    """The ``model`` and ``samples`` fields of a ``fit_start`` event."""

    model: ModelSummary
    samples: dict[str, int | None]  # split → its samples (None: a stream without a length)


def summarize_model(model: Any) -> ModelSummary:
    """`model`'s class, parameter count and layer digest."""
    try:
        parameters: int | None = sum(int(p.numel()) for p in model.parameters())
    except ValueError:  # torch.nn.LazyLinear's and the like before their first forward
        parameters = None
    layers = _ADDRESS.sub("", repr(model))  # a function in a layer's repr: the same model in every process
    digest = hashlib.sha1(layers.encode(), usedforsecurity=False).hexdigest()[:8]
    return ModelSummary(name=type(model).__name__, parameters=parameters, digest=digest)


def trained_what(model: Any, samples: dict[str, int | None]) -> TrainedWhat:
    """The ``model`` and ``samples`` (`Splits.sizes`) a fit's start records."""
    return TrainedWhat(model=summarize_model(model), samples=samples)


def trained_text(what: TrainedWhat) -> str:
    """E.g. ``"Sequential, 25,418 parameters, on 1,437 training samples"`` (a dashboard's header)."""
    train = what["samples"].get("train")
    data = "" if train is None else f", on {train:,} training samples"
    return f"{what['model']['name']}, {_parameters(what['model']['parameters'])}{data}"


def model_text(summary: ModelSummary) -> str:
    """E.g. ``"Sequential, 25,418 parameters (#3f2a9c1b)"``."""
    return f"{summary['name']}, {_parameters(summary['parameters'])} (#{summary['digest']})"


def _parameters(count: int | None) -> str:
    return "lazy parameters" if count is None else f"{count:,} parameters"
