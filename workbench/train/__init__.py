"""Training on one device: config, the loop, events, control, checkpoints and run directories, and the
`Strategy` protocol the loop talks to (`SingleDevice` here; the distributed ones in the `parallel` package).
Names are imported on first use, so ``workbench.train.choices`` (what the command line lists) needs no torch.

>>> from workbench.presets import build_experiment
>>> from workbench.train import Trainer
>>> e = build_experiment("digits-mlp", epochs=1)
>>> Trainer(e.model, e.loss_fn, e.splits, e.config).fit().status
'finished'
"""

from workbench._lazy import lazy_attributes

_HOMES = {
    "Accuracy": "workbench.train.metrics",
    "Callback": "workbench.train.events",
    "CallbackList": "workbench.train.events",
    "Changes": "workbench.train.control",
    "EarlyStopping": "workbench.train.config",
    "Event": "workbench.train.events",
    "F1": "workbench.train.metrics",
    "FitPlan": "workbench.train.lr_scheduler",
    "FitResult": "workbench.train.loop",
    "Follower": "workbench.train.follow",
    "Job": "workbench.train.job",
    "LoaderConfig": "workbench.data",
    "LrRange": "workbench.train.lr_range",
    "LrScheduler": "workbench.train.lr_scheduler",
    "MLflowLogger": "workbench.train.loggers",
    "Metric": "workbench.train.metrics",
    "MetricsLog": "workbench.train.metrics_log",
    "NonFiniteLossError": "workbench.train.loss_check",
    "OPTIMIZERS": "workbench.train.choices",
    "Objective": "workbench.train.objective",
    "OptimizerConfig": "workbench.train.config",
    "PRECISIONS": "workbench.train.choices",
    "Precision": "workbench.train.precision",
    "RanksStopped": "workbench.train.interrupts",
    "RunDir": "workbench.train.run_dir",
    "SCHEDULES": "workbench.train.choices",
    "SingleDevice": "workbench.train.strategy",
    "Strategy": "workbench.train.strategy",
    "StrategyBase": "workbench.train.strategy",
    "Supervision": "workbench.train.supervision",
    "TensorBoardLogger": "workbench.train.loggers",
    "TrainConfig": "workbench.train.config",
    "TrainControl": "workbench.train.control",
    "Trainer": "workbench.train.loop",
    "build_optimizer": "workbench.train.optim",
    "find_lr": "workbench.train.lr_range",
    "follow_metrics": "workbench.train.follow",
    "load_checkpoint": "workbench.train.checkpoint",
    "lr_factor": "workbench.train.optim",
    "read_metrics": "workbench.train.metrics_log",
    "resolve_precision": "workbench.train.precision",
    "save_checkpoint": "workbench.train.checkpoint",
    "supervised": "workbench.train.supervision",
}

__all__ = sorted(_HOMES)

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
