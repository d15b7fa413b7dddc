"""Training on one device: config, the loop, events, control, checkpoints and run directories, and the
`Strategy` protocol the loop talks to (`SingleDevice` here; the distributed ones in the `parallel` package).

>>> from workbench.presets import build_experiment
>>> from workbench.train import Trainer
>>> e = build_experiment("digits-mlp", epochs=1)
>>> Trainer(e.model, e.loss_fn, e.splits, e.config).fit().status
'finished'
"""

from workbench.data import LoaderConfig
from workbench.train.checkpoint import load_checkpoint, save_checkpoint
from workbench.train.config import OPTIMIZERS, PRECISIONS, SCHEDULES, OptimizerConfig, TrainConfig
from workbench.train.control import Changes, TrainControl
from workbench.train.events import Callback, CallbackList, Event
from workbench.train.follow import Follower, follow_metrics
from workbench.train.job import Job
from workbench.train.loggers import MLflowLogger, TensorBoardLogger
from workbench.train.loop import FitResult, Trainer
from workbench.train.loss_check import NonFiniteLossError
from workbench.train.metrics import F1, Accuracy, Metric
from workbench.train.metrics_log import MetricsLog, read_metrics
from workbench.train.objective import Objective
from workbench.train.optim import build_optimizer, lr_factor
from workbench.train.precision import Precision, resolve_precision
from workbench.train.run_dir import RunDir
from workbench.train.strategy import SingleDevice, Strategy, StrategyBase
from workbench.train.supervision import Supervision, supervised

__all__ = [
    "F1",
    "OPTIMIZERS",
    "PRECISIONS",
    "SCHEDULES",
    "Accuracy",
    "Callback",
    "CallbackList",
    "Changes",
    "Event",
    "FitResult",
    "Follower",
    "Job",
    "LoaderConfig",
    "MLflowLogger",
    "Metric",
    "MetricsLog",
    "NonFiniteLossError",
    "Objective",
    "OptimizerConfig",
    "Precision",
    "RunDir",
    "SingleDevice",
    "Strategy",
    "StrategyBase",
    "Supervision",
    "TensorBoardLogger",
    "TrainConfig",
    "TrainControl",
    "Trainer",
    "build_optimizer",
    "follow_metrics",
    "load_checkpoint",
    "lr_factor",
    "read_metrics",
    "resolve_precision",
    "save_checkpoint",
    "supervised",
]
