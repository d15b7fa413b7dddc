"""The line to write for a torch lr scheduler given the wrong way: ``LrScheduler(lambda optimizer, plan:
Name(optimizer, settings...), every=...)``, with the settings a built scheduler keeps."""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from workbench.train.trainer_keywords import same_value


def is_plateau(value: Any) -> bool:
    """Whether `value` is a ReduceLROnPlateau or that class (it steps on a val metric)."""
    return isinstance(value, ReduceLROnPlateau) or value is ReduceLROnPlateau


def kind_name(value: Any) -> str:
    """The scheduler's class name, for a scheduler or its class."""
    return value.__name__ if isinstance(value, type) else type(value).__name__


def factory_line(value: Any, every: str) -> str:
    """``LrScheduler(lambda optimizer, plan: Name(optimizer, ...), every=...)`` for a scheduler (with the
    settings it was built with) or its class."""
    built = built_with(value) if isinstance(value, type | LRScheduler) else "OneCycleLR(optimizer, ...)"
    watched = ", monitor='accuracy'" if getattr(value, "mode", None) == "max" and is_plateau(value) else ""
    return f"LrScheduler(lambda optimizer, plan: {built}, every={every!r}{watched})"


def built_with(value: Any) -> str:
    """``Name(optimizer, setting=...)``: the settings a scheduler keeps as attributes that differ from its
    defaults; ``...`` for a required one it does not keep; OneCycleLR's lr and length from the plan."""
    kind = value if isinstance(value, type) else type(value)
    if kind.__name__ == "OneCycleLR":  # its length must be the fit's, or its step raises at the end
        return "OneCycleLR(optimizer, max_lr=plan.lr, total_steps=plan.steps)"
    try:
        parameters = list(inspect.signature(kind).parameters.values())[1:]  # after the optimizer
    except (TypeError, ValueError):
        return f"{kind.__name__}(optimizer, ...)"
    settings = []
    for parameter in parameters:
        if parameter.name in ("last_epoch", "verbose") or parameter.kind is parameter.VAR_KEYWORD:
            continue
        kept = getattr(value, parameter.name, inspect.Parameter.empty)
        if isinstance(kept, Counter):  # MultiStepLR's milestones
            kept = sorted(kept.elements())
        if kept is inspect.Parameter.empty or isinstance(value, type):
            if parameter.default is inspect.Parameter.empty:
                settings.append(f"{parameter.name}=...")
        elif not same_value(kept, parameter.default):
            settings.append(f"{parameter.name}={kept!r}")
    return f"{kind.__name__}({', '.join(['optimizer', *settings])})"
