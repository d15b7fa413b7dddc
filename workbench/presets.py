"""Named experiments (dataset + model + loss + config) for the CLI and the tutorials.

Example:
    >>> sorted(PRESETS)
    ['digits-mlp', 'images-cnn', 'images-cnn-head', 'regression-linear', 'text-transformer']
    >>> experiment = build_experiment("regression-linear", n_samples=1000, epochs=1)
    >>> experiment.config.epochs, len(experiment.splits.train)
    (1, 800)
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from workbench import models
from workbench.data import DATASETS, Dataset, Splits, load_dataset, split_dataset
from workbench.data.datasets import dataset_options
from workbench.preset_catalog import PRESET_DESCRIPTIONS, check_preset
from workbench.train.config import OptimizerConfig, TrainConfig
from workbench.train.strategy import LossFn

SPLIT_FRACTIONS = (0.8, 0.1, 0.1)


@dataclass(frozen=True)
class Preset:
    """A named experiment: which data, which model, which loss, and the config that trains it well."""

    description: str
    dataset: str
    build_model: Callable[[Dataset], nn.Module]
    loss_fn: LossFn
    config: TrainConfig
    dataset_options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    """Everything `Trainer` needs: ``Trainer(e.model, e.loss_fn, e.splits, e.config)``."""

    name: str
    model: nn.Module
    loss_fn: LossFn
    splits: Splits
    config: TrainConfig


PRESETS: dict[str, Preset] = {
    "digits-mlp": Preset(
        PRESET_DESCRIPTIONS["digits-mlp"],
        "digits",
        lambda data: models.mlp(data.features[0].numel(), data.num_classes, hidden=(128, 128)),
        functional.cross_entropy,
        TrainConfig(epochs=20, batch_size=64, optimizer=OptimizerConfig("adam", lr=3e-3)),
    ),
    "regression-linear": Preset(
        PRESET_DESCRIPTIONS["regression-linear"],
        "regression",
        lambda data: models.linear(data.features.shape[1]),
        functional.mse_loss,
        TrainConfig(epochs=1, batch_size=1024, optimizer=OptimizerConfig("sgd", lr=0.05, momentum=0.9)),
    ),
    "images-cnn": Preset(
        PRESET_DESCRIPTIONS["images-cnn"],
        "synthetic_images",
        lambda data: models.small_cnn(data.features.shape[1], data.num_classes),
        functional.cross_entropy,
        TrainConfig(epochs=2, batch_size=128, optimizer=OptimizerConfig("adamw", lr=3e-3)),
    ),
    "images-cnn-head": Preset(
        PRESET_DESCRIPTIONS["images-cnn-head"],
        "synthetic_images",
        lambda data: models.small_cnn(data.features.shape[1], data.num_classes, hidden=64),
        functional.cross_entropy,
        TrainConfig(epochs=2, batch_size=128, optimizer=OptimizerConfig("adamw", lr=3e-3)),
    ),
    "text-transformer": Preset(
        PRESET_DESCRIPTIONS["text-transformer"],
        "text",
        lambda data: models.transformer_lm(
            data.num_classes, data.features.shape[1], d_model=64, n_heads=4, n_layers=2
        ),
        models.next_token_loss,
        TrainConfig(epochs=2, batch_size=32, optimizer=OptimizerConfig("adamw", lr=3e-3)),
        {"n_samples": 2048, "context": 32},
    ),
}
assert list(PRESETS) == list(PRESET_DESCRIPTIONS), "a preset is built here and described in preset_catalog"

_CONFIG_FIELDS = {f.name for f in fields(TrainConfig)}
_OPTIMIZER_FIELDS = {f.name for f in fields(OptimizerConfig)}


def build_experiment(name: str, **changes: Any) -> Experiment:
    """The preset `name` with `changes`: TrainConfig fields (``epochs=3``), OptimizerConfig fields
    (``lr=0.1``, ``optimizer="sgd"`` for its name) or dataset options (``n_samples=1000``).

    Seeds torch with the config's seed before building the model, so the same changes give the same model.
    """
    preset = PRESETS[check_preset(name)]
    _refuse_unknown_changes(name, preset, changes)
    config_changes, optimizer_changes, data_options = {}, {}, dict(preset.dataset_options)
    for key, value in changes.items():
        if key == "optimizer" and isinstance(value, str):
            optimizer_changes["name"] = value
        elif key in _CONFIG_FIELDS:
            config_changes[key] = value
        elif key in _OPTIMIZER_FIELDS:
            optimizer_changes[key] = value
        else:
            data_options[key] = value
    if optimizer_changes:
        base = _fields_of(config_changes.get("optimizer", preset.config.optimizer))
        if optimizer_changes.get("name", base["name"]) != base["name"]:
            # another optimizer: the preset's optimizer-specific settings do not carry over
            for key in ("momentum", "nesterov", "betas"):
                base.pop(key)
        config_changes["optimizer"] = OptimizerConfig(**{**base, **optimizer_changes})
    if config_changes.get("max_steps") is not None and "epochs" not in config_changes:
        config_changes["epochs"] = TrainConfig.epochs  # the length is max_steps, not the preset's epochs
    config = preset.config.replace(**config_changes)
    data = load_dataset(preset.dataset, **data_options)
    splits = split_dataset(data, SPLIT_FRACTIONS, seed=config.seed)
    torch.manual_seed(config.seed)
    return Experiment(name, preset.build_model(data), preset.loss_fn, splits, config)


def _refuse_unknown_changes(name: str, preset: Preset, changes: dict[str, Any]) -> None:
    """ValueError naming a change that is no TrainConfig or OptimizerConfig field and no dataset's option (a
    misspelt ``epoch=3`` would otherwise reach the dataset as an option it lacks)."""
    options, optimizer_fields = dataset_options(preset.dataset), sorted(_OPTIMIZER_FIELDS - {"name"})
    known = [*_CONFIG_FIELDS, *optimizer_fields, *options]
    any_dataset = {option for dataset in DATASETS for option in dataset_options(dataset)}
    unknown = [key for key in changes if key not in known]
    if all(key in any_dataset for key in unknown):  # none, or another dataset's option: load_dataset says so
        return
    close = difflib.get_close_matches(unknown[0], known, n=1, cutoff=0.6)
    guess = f"; did you mean {close[0]}=?" if close else ""
    raise ValueError(
        f"build_experiment({name!r}) takes no change {', '.join(unknown)}{guess}; it takes TrainConfig "
        f"fields ({', '.join(sorted(_CONFIG_FIELDS))}), OptimizerConfig fields "
        f"({', '.join(optimizer_fields)}) and the options of dataset {preset.dataset!r} "
        f"({', '.join(options) or 'none'})"
    )


def _fields_of(config: OptimizerConfig) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in fields(config)}
