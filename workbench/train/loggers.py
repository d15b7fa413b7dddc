"""Send a run's metrics to the tools people already open: TensorBoard (the ``tensorboard`` extra).

A logger is a `Callback`: it writes what rank 0 logs (every numeric step field, every evaluation metric, the
config) and never stops training: if it fails (a full disk, a closed file), it warns once and the run goes
on, its ``metrics.jsonl`` complete.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from workbench.train.events import Callback, Event, evaluation_metrics

_NOT_SCALARS = {"step", "epoch", "rank", "time"}


class TensorBoardLogger(Callback):
    """Writes each fit's metrics as TensorBoard scalars under ``log_dir/<run name>``.

    Step fields go to ``train/<name>`` (``train/loss``, ``train/lr``, ``train/grad_norm``,
    ``train/samples_per_s``), evaluations to ``<split>/<metric>`` (``val/loss``, ``val/accuracy``), against
    the optimizer step; the config goes in as text (``config``). Open them with
    ``tensorboard --logdir <log_dir> --host 127.0.0.1``: one line per run, side by side.

    Args:
        log_dir: the folder holding one TensorBoard run per fit (named after ``Trainer(run=...)``, or
            ``run`` when the trainer has no name).

    Example:
        >>> import tempfile
        >>> from workbench.presets import build_experiment
        >>> from workbench.train import Trainer
        >>> logs = tempfile.mkdtemp()
        >>> e = build_experiment("digits-mlp", epochs=1)
        >>> logger = TensorBoardLogger(logs)
        >>> trainer = Trainer(e.model, e.loss_fn, e.splits, e.config, callbacks=[logger], run="a",
        ...                   runs_dir=tempfile.mkdtemp())
        >>> _ = trainer.fit()
        >>> sorted(p.name for p in Path(logs).iterdir())
        ['a']
    """

    def __init__(self, log_dir: str | os.PathLike) -> None:
        self.log_dir = Path(log_dir)
        self.failed: str | None = None  # why logging stopped, when it did
        self._writer: Any = None

    def on_fit_start(self, info: Event) -> None:
        if info.get("rank", 0) != 0:
            return  # rank 0 logs for everyone (its losses are the means over ranks)
        self._safely(self._open, info)

    def on_step(self, metrics: Event) -> None:
        if self._writer is not None and metrics.get("rank", 0) == 0:
            scalars = {f"train/{k}": v for k, v in metrics.items() if k not in _NOT_SCALARS and _number(v)}
            self._safely(self._write, scalars, metrics["step"])

    def on_eval(self, metrics: Event) -> None:
        if self._writer is not None:
            split = metrics.get("split", "val")
            scalars = {f"{split}/{k}": v for k, v in evaluation_metrics(metrics).items()}
            self._safely(self._write, scalars, metrics["step"])

    def on_fit_end(self, summary: Event) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            self._safely(writer.close)

    def _open(self, info: Event) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        resumed = info.get("start_step", 0) > 0
        self._writer = SummaryWriter(self.log_dir / str(info.get("run") or "run"), purge_step=None)
        if not resumed:
            config = json.dumps(info.get("config", {}), indent=2, default=str)
            self._writer.add_text("config", f"```\n{config}\n```", 0)

    def _write(self, scalars: dict[str, float], step: int) -> None:
        for tag, value in scalars.items():
            self._writer.add_scalar(tag, float(value), step)

    def _safely(self, action: Any, *args: Any) -> None:
        if self.failed is not None:
            return
        try:
            action(*args)
        except Exception as error:  # a logger never stops training
            self.failed = f"{type(error).__name__}: {error}"
            self._writer = None
            warnings.warn(
                f"TensorBoardLogger stopped logging to {self.log_dir} ({self.failed}); training goes on and "
                "metrics.jsonl keeps every event",
                stacklevel=2,
            )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
