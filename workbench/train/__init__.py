"""Training: config, loop, events, checkpoints, presets; strategies (one device, DDP, FSDP, pipeline and
tensor parallel) and the launcher.

>>> from workbench.train import Trainer, build_experiment
>>> e = build_experiment("digits-mlp", epochs=1)
>>> Trainer(e.model, e.loss_fn, e.splits, e.config).fit().status
'finished'
"""

from workbench.train import models
from workbench.train.checkpoint import load_checkpoint, save_checkpoint
from workbench.train.config import OPTIMIZERS, PRECISIONS, SCHEDULES, OptimizerConfig, TrainConfig
from workbench.train.control import Changes, TrainControl
from workbench.train.events import Broadcast, Callback, Event
from workbench.train.follow import Follower, follow_metrics
from workbench.train.fsdp import FullyShardedDataParallel
from workbench.train.launch import Launch, WorkerFailed, free_port, launch
from workbench.train.loop import FitResult, NonFiniteLossError, Trainer
from workbench.train.metrics_log import MetricsLog, read_metrics
from workbench.train.optim import build_optimizer, lr_factor
from workbench.train.pipeline import PipelineParallel
from workbench.train.precision import Precision, resolve_precision
from workbench.train.presets import PRESETS, Experiment, Preset, build_experiment
from workbench.train.strategy import DataParallel, DistributedStrategy, SingleDevice, Strategy
from workbench.train.tensor_parallel import TensorParallel

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "PRESETS",
    "SCHEDULES",
    "Broadcast",
    "Callback",
    "Changes",
    "DataParallel",
    "DistributedStrategy",
    "Event",
    "Experiment",
    "FitResult",
    "Follower",
    "FullyShardedDataParallel",
    "Launch",
    "MetricsLog",
    "NonFiniteLossError",
    "OptimizerConfig",
    "PipelineParallel",
    "Precision",
    "Preset",
    "SingleDevice",
    "Strategy",
    "TensorParallel",
    "TrainConfig",
    "TrainControl",
    "Trainer",
    "WorkerFailed",
    "build_experiment",
    "build_optimizer",
    "follow_metrics",
    "free_port",
    "launch",
    "load_checkpoint",
    "lr_factor",
    "models",
    "read_metrics",
    "resolve_precision",
    "save_checkpoint",
]
