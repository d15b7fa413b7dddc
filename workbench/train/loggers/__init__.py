"""Send a run's metrics to the tools people already open: TensorBoard and MLflow (each an optional extra).

A logger is a `Callback`: rank 0's events only (every numeric step field, every evaluation metric, the
config); it never stops training: if it fails (a full disk, a server gone), it warns once and the run goes
on, its ``metrics.jsonl`` complete.
"""

from workbench.train.loggers.mlflow_logger import MLflowLogger
from workbench.train.loggers.rank_zero import RankZeroLogger
from workbench.train.loggers.tensorboard_logger import TensorBoardLogger

__all__ = ["MLflowLogger", "RankZeroLogger", "TensorBoardLogger"]
