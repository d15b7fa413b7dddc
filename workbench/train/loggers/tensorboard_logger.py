"""`TensorBoardLogger`: a run's metrics as TensorBoard scalars (the ``tensorboard`` extra)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from workbench.train.events import Event
from workbench.train.loggers.rank_zero import RankZeroLogger


class TensorBoardLogger(RankZeroLogger):
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

    extra = module = "tensorboard"

    def __init__(self, log_dir: str | os.PathLike) -> None:
        self.log_dir = Path(log_dir)
        super().__init__(str(self.log_dir))
        self._writer: Any = None

    def _open(self, info: Event) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(self.log_dir / str(info.get("run") or "run"))
        if info.get("start_step", 0) == 0:  # a resumed fit keeps the config text it has
            config = json.dumps(info.get("config", {}), indent=2, default=str)
            self._writer.add_text("config", f"```\n{config}\n```", 0)

    def _write_step(self, numbers: dict[str, float], event: Event) -> None:
        self._write({f"train/{k}": v for k, v in numbers.items()}, event["step"])

    def _write_eval(self, numbers: dict[str, float], event: Event) -> None:
        split = event.get("split", "val")
        self._write({f"{split}/{k}": v for k, v in numbers.items()}, event["step"])

    def _write(self, scalars: dict[str, float], step: int) -> None:
        for tag, value in scalars.items():
            self._writer.add_scalar(tag, value, step)

    def _close(self, summary: Event) -> None:
        writer, self._writer = self._writer, None
        writer.close()
