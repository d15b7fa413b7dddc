"""Where the predictions and the targets are: in a model's outputs (a tensor, ``.logits`` or ``["logits"]``)
and in a batch (its last element, or a dict's ``labels``/``targets``/``y``), for the metrics to read.

    >>> import torch
    >>> is_classification({"logits": torch.zeros(4, 3)}, {"labels": torch.tensor([0, 2, 1, 1])})
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

TARGET_KEYS = ("labels", "label", "targets", "target", "y")


def logits_of(outputs: Any) -> torch.Tensor | None:
    """The prediction tensor in a model's outputs: the tensor itself, ``.logits`` or ``["logits"]``."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, Mapping):
        return outputs.get("logits")
    logits = getattr(outputs, "logits", None)
    return logits if isinstance(logits, torch.Tensor) else None


def targets_of(batch: Any) -> torch.Tensor | None:
    """The targets in a batch: the last element of a tuple/list, or a dict's ``labels``/``targets``/``y``."""
    if isinstance(batch, Mapping):
        for key in TARGET_KEYS:
            if isinstance(batch.get(key), torch.Tensor):
                return batch[key]
        return None
    if isinstance(batch, tuple | list) and batch and isinstance(batch[-1], torch.Tensor):
        return batch[-1]
    return None


def is_classification(outputs: Any, batch: Any) -> bool:
    """True when the outputs are class scores for integer targets: ``(..., classes)`` against ``(...)``."""
    logits, targets = logits_of(outputs), targets_of(batch)
    if logits is None or targets is None or targets.is_floating_point() or targets.dtype == torch.bool:
        return False
    return logits.ndim == targets.ndim + 1 and logits.shape[:-1] == targets.shape
