"""The Trainer's arguments checked before anything is built: each refusal names the argument, what it got,
what it accepts and the fix.

Example:
    >>> check_arguments(torch.nn.Linear(2, 1), None, None, [], None)
    >>> check_arguments(torch.nn.Identity(), None, None, [], None)
    Traceback (most recent call last):
    ...
    ValueError: the model (Identity) has no parameters, so there is nothing to train: ...
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from typing import Any

import torch

from workbench._validate import BUILD_THE_MODEL, check_called_as, refuse_class
from workbench.data import Dataset, Splits, split_size
from workbench.train.config import EarlyStopping, OptimizerConfig, TrainConfig
from workbench.train.optim import build_optimizer
from workbench.train.strategy import StrategyBase
from workbench.train.trainer_keywords import HOOKS, refuse_peers_callback


def check_arguments(model: Any, config: Any, strategy: Any, callbacks: Any, optimizer_factory: Any) -> None:
    """TypeError naming the argument, what it got and what it accepts, before anything is built."""
    refuse_class("model", model, BUILD_THE_MODEL)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module, got {type(model).__name__}; wrap a function in an "
            "nn.Module (its forward), or pass the module itself rather than its output"
        )
    if config is not None and not isinstance(config, TrainConfig):
        hint = " (build it with TrainConfig(**that_dict))" if isinstance(config, dict) else ""
        if isinstance(config, torch.utils.data.Dataset | torch.utils.data.DataLoader | Dataset):
            together = "Trainer(model, loss_fn, (train, val), config)"
            hint = f": the splits go together, as the third argument: {together}"
        raise TypeError(f"config must be a TrainConfig or None, got {type(config).__name__}{hint}")
    if strategy is not None and not isinstance(strategy, StrategyBase):
        hint = " (an instance, e.g. DataParallel(), not the class)" if isinstance(strategy, type) else ""
        raise TypeError(
            f"strategy must be a strategy object such as SingleDevice('cpu') or, inside launch/torchrun, "
            f"DataParallel(); got {strategy!r}{hint}"
        )
    check_callbacks(callbacks)
    parameters = list(model.parameters())
    if not parameters:
        raise ValueError(
            f"the model ({type(model).__name__}) has no parameters, so there is nothing to train: give a "
            "model with layers that hold weights (nn.Linear, nn.Conv2d, ...)"
        )
    if not any(p.requires_grad for p in parameters):
        raise ValueError(
            f"every parameter of the model ({len(parameters)} tensors) has requires_grad=False, so training "
            "would change nothing: unfreeze what should learn (p.requires_grad_(True) for its parameters)"
        )
    fix = "use optimizer_factory=lambda params, cfg: torch.optim.RMSprop(params, lr=cfg.lr)"
    if isinstance(optimizer_factory, type):
        name = optimizer_factory.__name__
        raise TypeError(
            f"optimizer_factory must be a function factory(params, optimizer_config) -> "
            f"torch.optim.Optimizer, got the class {name}; use optimizer_factory=lambda params, cfg: "
            f"{name}(params, lr=cfg.lr)"
        )
    if optimizer_factory is not None and not callable(optimizer_factory):
        raise TypeError(
            f"optimizer_factory must be a function factory(params, optimizer_config) -> "
            f"torch.optim.Optimizer, got {type(optimizer_factory).__name__}; {fix}"
        )
    if optimizer_factory is not None:
        check_called_as("optimizer_factory", optimizer_factory, "factory(params, optimizer_config)", fix)


def check_callbacks(callbacks: Any) -> None:
    """TypeError for `callbacks` that are no list of callbacks, or one that cannot take the events (a class,
    an object without hooks, hooks that take other arguments, such as Lightning's)."""
    if isinstance(callbacks, str | bytes) or not isinstance(callbacks, Iterable):
        raise TypeError(
            f"callbacks must be a list of callbacks (e.g. [plot]), got {type(callbacks).__name__}"
        )
    for index, callback in enumerate(callbacks):
        refuse_class(f"callbacks[{index}]", callback, "give an instance: {name}()")
        if not any(callable(getattr(callback, hook, None)) for hook in HOOKS):
            if isinstance(callback, EarlyStopping):
                raise TypeError(
                    f"callbacks[{index}] is an EarlyStopping, which is a setting, not a callback: write "
                    f"config=TrainConfig(early_stopping={callback!r})"
                )
            raise TypeError(
                f"callbacks[{index}] is a {type(callback).__name__}, which has none of the hooks "
                f"{', '.join(HOOKS)}; give a workbench.train.Callback (or a widget such as LossPlot)"
            )
        refuse_peers_callback(index, callback)


def check_optimizer(factory: Any, params: Any, config: OptimizerConfig) -> torch.optim.Optimizer:
    """The optimizer `factory` (an `optimizer_factory`, None: `build_optimizer`) builds on `params` at
    `config`; TypeError naming what a factory returned that is not one."""
    optimizer = (factory or build_optimizer)(params, config)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer_factory returned {type(optimizer).__name__}"
            f"{'' if optimizer is None else f' {optimizer!r:.60}'}, not a torch.optim.Optimizer: return the "
            "optimizer built on the params given (lambda params, cfg: torch.optim.SGD(params, lr=cfg.lr))"
        )
    return optimizer


def check_training_split(train: Any) -> None:
    """ValueError for a training split without samples."""
    if (len(train) if isinstance(train, Dataset) else split_size(train)) == 0:
        raise ValueError("splits.train is empty (the training split); give it at least one sample")


def warn_unevaluated_metrics(splits: Splits, metrics: Any, *, warn: bool = True) -> None:
    """A warning (where `warn`: the main rank) when `metrics` are given but no split evaluates them (fit
    runs them on val and test only)."""
    if warn and metrics and splits.val is None and splits.test is None:
        warnings.warn(
            f"fit() computes metrics {sorted(map(str, metrics))} on the val and test splits, and splits has "
            "only train, so fit will not report them: give (train, val) to see them after each epoch (or "
            "call trainer.evaluate('train'))",
            stacklevel=4,  # the Trainer's caller (past its keyword wrapper)
        )


def check_device(config: TrainConfig, device: torch.device) -> torch.device:
    """`device`, the strategy's; ValueError when ``config.device`` names another one."""
    if config.device not in ("auto", device.type):
        raise ValueError(
            f"config.device={config.device!r} but the strategy trains on {device}; use device='auto' with a "
            "distributed strategy"
        )
    return device


def check_resume(resume: object) -> None:
    """TypeError unless `resume` is what ``fit(resume=...)`` takes."""
    if isinstance(resume, torch.nn.Module | torch.utils.data.Dataset | torch.utils.data.DataLoader | Dataset):
        raise TypeError(
            f"fit() got {type(resume).__name__} as resume: the model and the data are the Trainer's, given "
            "once to Trainer(model, loss_fn, splits, config); call trainer.fit() (resume=True continues this "
            "run's checkpoint)"
        )
    if not isinstance(resume, bool | str | os.PathLike):
        raise TypeError(
            f"resume must be True (this run's checkpoint), False, or a checkpoint's path; got "
            f"{type(resume).__name__} {resume!r}"
        )
