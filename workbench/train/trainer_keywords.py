"""What a keyword the Trainer does not take was meant to be, said instead of Python's "unexpected keyword
argument": peers' habits (``optimizer=torch.optim.Adam(...)``, ``scheduler=``, ``max_epochs=``,
``train_dataset=``, ``accelerator=``) and the fields of the configs, with the line to write; and the
peers' methods and attributes it lacks (``trainer.validate()``, ``trainer.global_step``), with its own.

    >>> print(unknown_keyword("epochs", 3, ["config", "metrics"], has_config=False))
    Trainer() takes no argument epochs: epochs is in TrainConfig; write config=TrainConfig(epochs=3)
    >>> print(unknown_keyword("learning_rate", 0.01, ["config", "metrics"], has_config=True))
    Trainer() takes no argument learning_rate: learning_rate is OptimizerConfig's lr; write config=config.replace(optimizer={'lr': 0.01})
"""  # noqa: E501

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from workbench.data import LoaderConfig
from workbench.train.choices import OPTIMIZERS
from workbench.train.config import PEERS_NAMES, OptimizerConfig, TrainConfig, _fields

OPTIMIZER_NAMES = ("optimizer", "optimizers", "optim", "opt")
SCHEDULE_NAMES = ("lr_scheduler", "lr_schedulers", "schedulers")
DATA_NAMES = (
    "train_dataset", "train_data", "train_dataloader", "train_dataloaders", "train_loader", "dataset",
    "data", "datamodule", "val_dataset", "eval_dataset", "valid_dataset", "val_dataloaders", "val_loader",
    "test_dataset",
)  # fmt: skip
DEVICE_NAMES = ("accelerator", "gpus", "devices", "num_gpus")
LOADER_ALIASES = {"workers": "num_workers", "pin": "pin_memory"}


PEERS_ATTRIBUTES = {  # Lightning's (and Hugging Face's) Trainer attributes, and what stands for them here
    "validate": "trainer.evaluate('val') evaluates the val split (fit does after each epoch)",
    "test": "trainer.evaluate('test') evaluates the test split (fit does once, when it finishes)",
    "train": "trainer.fit() trains (fit(resume=True) continues the run's checkpoint)",
    "global_step": "trainer.step counts the optimizer steps taken",
    "current_epoch": "trainer.epoch is the epoch the loop is at",
    "max_epochs": "trainer.config.epochs",
    "max_steps": "trainer.config.max_steps (None: the fit is config.epochs long)",
    "callback_metrics": "fit() returns them: result.metrics, or read_metrics(run directory) for each step",
    "logged_metrics": "fit() returns them: result.metrics, or read_metrics(run directory) for each step",
    "save_checkpoint": "Trainer(..., run='name') saves runs/name/checkpoint.pt after each epoch "
    "(TrainConfig(checkpoint_every=...)); trainer.checkpoint is its path",
    "optimizers": "trainer.optimizer",
    "lr_schedulers": "trainer.scheduler (the torch one of scheduler=LrScheduler(...)), else the config's "
    "trainer.config.optimizer.schedule; the lr now: trainer.optimizer.param_groups[0]['lr']",
}


PEERS_CALLBACKS = {  # Lightning's callbacks, and what stands for them here
    "ModelCheckpoint": "Here Trainer(..., run='name') writes runs/name/checkpoint.pt after each epoch "
    "(TrainConfig(checkpoint_every=...)), and with early stopping the best epoch's weights to best.pt",
    "LearningRateMonitor": "Every logged step's event carries its lr (runs/name/metrics.jsonl with run=, "
    "the Dashboard's metric plot)",
    "TQDMProgressBar": "The Trainer shows a progress bar itself (Trainer(..., progress=True or False))",
    "RichProgressBar": "The Trainer shows a progress bar itself (Trainer(..., progress=True or False))",
    "GradientAccumulationScheduler": "Here TrainConfig(accumulate=N) accumulates N micro-batches per step",
}
HOOKS = ("on_fit_start", "on_step", "on_eval", "on_fit_end")


def refuse_peers_callback(index: int, callback: Any) -> None:
    """TypeError when `callback`'s hooks cannot take the one event each gets (a Lightning callback's take
    ``(trainer, pl_module)``), saying what stands for it here; it used to fail at the fit's first event."""
    for hook in HOOKS:
        method = getattr(callback, hook, None)
        try:
            signature = inspect.signature(method) if callable(method) else None
            if signature is not None:
                signature.bind({})
        except ValueError:  # a builtin without a signature: called as it is
            continue
        except TypeError:
            name, takes = type(callback).__name__, ", ".join(signature.parameters) if signature else ""
            ours = "on_fit_start(info), on_step(metrics), on_eval(metrics), on_fit_end(summary)"
            if not type(callback).__module__.startswith(("lightning", "pytorch_lightning")):
                raise TypeError(
                    f"callbacks[{index}] ({name}) has {hook}({takes}), and the Trainer calls each hook with "
                    f"one event dict: {ours}; define it as def {hook}(self, event)"
                ) from None
            here = _lightning_stand_in(name, callback) or "write a workbench.train.Callback with those hooks"
            raise TypeError(
                f"callbacks[{index}] is Lightning's {name}, whose hooks take (trainer, pl_module); this "
                f"Trainer's callbacks get one event dict ({ours}). {here}"
            ) from None


def _lightning_stand_in(name: str, callback: Any) -> str | None:
    """What stands for Lightning's callback `name` here (its settings carried over), or None."""
    if name != "EarlyStopping":
        return PEERS_CALLBACKS.get(name)
    metric = str(getattr(callback, "monitor", "loss") or "loss")
    for prefix in ("val_", "val/", "valid_", "validation_"):
        metric = metric.removeprefix(prefix)
    metric = {"acc": "accuracy"}.get(metric, metric)
    settings = [repr(metric), f"patience={getattr(callback, 'patience', 3)!r}"]
    if delta := abs(float(getattr(callback, "min_delta", 0.0) or 0.0)):
        settings.append(f"min_delta={delta:g}")
    if getattr(callback, "mode", None) in ("min", "max") and metric != "loss":
        settings.append(f"mode={callback.mode!r}")
    line = f"config=TrainConfig(early_stopping=EarlyStopping({', '.join(settings)}))"
    return (
        "Early stopping is a setting here, which also ends the fit with the best epoch's weights: "
        f"{line} (workbench.train's EarlyStopping)"
    )


class PeersAttributes:
    """A missing attribute that another trainer has (``trainer.validate``) says what stands for it here."""

    def __getattr__(self, name: str) -> Any:
        here = PEERS_ATTRIBUTES.get(name)
        said = f"{type(self).__name__!r} object has no attribute {name!r}"
        raise AttributeError(f"{said}: {here}" if here else said, name=name, obj=self)


def explaining_unknown_keywords(init: Callable[..., None]) -> Callable[..., None]:
    """`init` (the Trainer's ``__init__``) refusing a keyword it lacks with `unknown_keyword`'s TypeError."""
    accepted = [name for name in inspect.signature(init).parameters if name != "self"]

    @functools.wraps(init)
    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        unknown = [name for name in kwargs if name not in accepted]
        if unknown:
            has_config = len(args) >= 4 or kwargs.get("config") is not None
            raise TypeError(unknown_keyword(unknown[0], kwargs[unknown[0]], accepted, has_config=has_config))
        init(self, *args, **kwargs)

    return __init__


def unknown_keyword(name: str, value: Any, accepted: list[str], *, has_config: bool) -> str:
    """The sentence that says what `name`=`value` given to the Trainer was meant to be, and what to write."""
    said = f"Trainer() takes no argument {name}"
    if name in OPTIMIZER_NAMES:
        return (
            f"{said}: it builds the optimizer itself, on the parameters it trains (DDP and FSDP wrap them "
            f"first); write {_optimizer_line(value, has_config)}"
        )
    if name in SCHEDULE_NAMES:
        example = _config_line({"optimizer": {"schedule": "cosine", "warmup_steps": 100}}, has_config)
        return (
            f"{said}: the lr schedule is OptimizerConfig's schedule ('constant', 'cosine' or 'linear', to 0 "
            f"at the last step) after warmup_steps of linear warm-up; write {example}; or give your torch "
            "scheduler, built on the Trainer's optimizer: scheduler=LrScheduler(lambda optimizer, plan: "
            "OneCycleLR(optimizer, plan.lr, plan.steps), every='step') (workbench.train's LrScheduler)"
        )
    if name in DATA_NAMES:
        return (
            f"{said}: the data is the third argument, splits: Trainer(model, loss_fn, (train, val), config) "
            "(or {'train': ..., 'val': ..., 'test': ...}; each a Dataset or a DataLoader)"
        )
    if name in DEVICE_NAMES:
        return (
            f"{said}: the device is TrainConfig's device ('auto': the GPU when there is one); write "
            f"{_config_line({'device': 'cuda'}, has_config)}; for several GPUs, run it under launch(...) or "
            "`workbench torchrun` with strategy=DataParallel()"
        )
    meant = PEERS_NAMES.get(name, LOADER_ALIASES.get(name, name))
    lives = f"{name} is {{}}'s {meant}" if meant != name else f"{name} is in {{}}"
    if meant in _fields(TrainConfig):
        return f"{said}: {lives.format('TrainConfig')}; write {_config_line({meant: value}, has_config)}"
    if meant in _fields(OptimizerConfig):
        line = _config_line({"optimizer": {meant: value}}, has_config)
        return f"{said}: {lives.format('OptimizerConfig')}; write {line}"
    if meant in _fields(LoaderConfig):
        line = _config_line({"loader": f"LoaderConfig({meant}={value!r})"}, has_config)
        return f"{said}: {lives.format('LoaderConfig')}; write {line}"
    close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.6)
    guess = f"; did you mean {close[0]}=?" if close else ""
    return f"{said}{guess}; it takes {', '.join(accepted)}"


def _optimizer_line(value: Any, has_config: bool) -> str:
    """The line that gives the Trainer the optimizer `value` describes (an instance, a class or a name)."""
    kind = value if isinstance(value, type) else type(value)
    if isinstance(value, str) and value.lower() in OPTIMIZERS:
        return _config_line({"optimizer": {"name": value.lower()}}, has_config)
    if isinstance(value, OptimizerConfig):
        return _config_line({"optimizer": _changed(dataclasses.asdict(value))}, has_config)
    if not issubclass(kind, torch.optim.Optimizer):
        line = _config_line({"optimizer": {"name": "adam", "lr": 1e-3}}, has_config)
        factory = "optimizer_factory=lambda params, cfg: torch.optim.RMSprop(params, lr=cfg.lr)"
        return f"{line}, or for another optimizer {factory}"
    settings = getattr(value, "defaults", {}) if isinstance(value, torch.optim.Optimizer) else {}
    if kind.__name__.lower() in OPTIMIZERS:
        return _config_line({"optimizer": _changed({**settings, "name": kind.__name__.lower()})}, has_config)
    name = kind.__name__
    path = f"torch.optim.{name}" if getattr(torch.optim, name, None) is kind else name
    own = "".join(f", {key}={setting!r}" for key, setting in _own_settings(kind, settings).items())
    factory = f"optimizer_factory=lambda params, cfg: {path}(params, lr=cfg.lr{own})"
    if "lr" not in settings:
        return factory
    return f"{_config_line({'optimizer': {'lr': settings['lr']}}, has_config)}, {factory}"


def _own_settings(kind: type, settings: dict[str, Any]) -> dict[str, Any]:
    """The settings but lr of an optimizer of class `kind` that differ from its constructor's defaults."""
    try:
        defaults = {name: p.default for name, p in inspect.signature(kind).parameters.items()}
    except (TypeError, ValueError):
        return {}
    return {
        key: setting
        for key, setting in settings.items()
        if key != "lr" and key in defaults and not same_value(setting, defaults[key])
    }


def same_value(a: Any, b: Any) -> bool:
    """``a == b`` for settings that may be tensors or arrays (whose ``==`` is no bool): False for those."""
    try:
        return bool(a == b)
    except (RuntimeError, TypeError, ValueError):  # a tensor setting
        return False


def _changed(settings: dict[str, Any]) -> dict[str, Any]:
    """The name and the OptimizerConfig fields in `settings` that differ from that optimizer's defaults, in
    the order OptimizerConfig lists them."""
    default = OptimizerConfig(name=settings["name"])
    fields = [field.name for field in dataclasses.fields(OptimizerConfig)]
    kept = {
        key: settings[key] for key in fields if key in settings and settings[key] != getattr(default, key)
    }
    return {"name": settings["name"], **kept}


def _config_line(changes: dict[str, Any], has_config: bool) -> str:
    """``config=TrainConfig(...)``, or ``config=config.replace(...)`` when the Trainer was given a config;
    an ``optimizer`` dict of OptimizerConfig fields is written as OptimizerConfig(...) or a replace's dict."""
    parts = []
    for key, change in changes.items():
        if key == "optimizer" and isinstance(change, dict):
            if has_config:
                parts.append(f"optimizer={change!r}")
                continue
            settings = dict(change)
            name = settings.pop("name", "adam")
            inside = ", ".join([repr(name), *(f"{k}={v!r}" for k, v in settings.items())])
            parts.append(f"optimizer=OptimizerConfig({inside})")
        else:
            parts.append(f"{key}={change}" if key in ("loader", "optimizer") else f"{key}={change!r}")
    return (
        f"config=config.replace({', '.join(parts)})"
        if has_config
        else f"config=TrainConfig({', '.join(parts)})"
    )
