"""`TensorBoardLogger`: a run's metrics as TensorBoard scalars (the ``tensorboard`` extra)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from workbench._validate import check_positive
from workbench.train.events import Event
from workbench.train.loggers.rank_zero import RankZeroLogger


class TensorBoardLogger(RankZeroLogger):
    """Writes each fit's metrics as TensorBoard scalars under ``log_dir/<run name>``.

    Step fields go to ``train/<name>`` (``train/loss``, ``train/lr``, ``train/grad_norm``,
    ``train/samples_per_s``), evaluations to ``<split>/<metric>`` (``val/loss``, ``val/accuracy``), against
    the optimizer step; the config goes in as text (``config``, with the model and each split's samples).
    Open them with ``tensorboard --logdir <log_dir> --host 127.0.0.1``: one line per run, side by side.
    Events are written on the training thread (~20 µs a logged step) and reach the disk at each evaluation,
    at the end, and at least every `flush_every_s` seconds while steps come.

    Args:
        log_dir: the folder holding one TensorBoard run per fit (named after ``Trainer(run=...)``, or
            ``run`` when the trainer has no name).
        flush_every_s: longest time a logged step waits in memory while steps come, > 0.

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

    def __init__(self, log_dir: str | os.PathLike, *, flush_every_s: float = 2.0) -> None:
        self.log_dir = Path(log_dir)
        super().__init__(str(self.log_dir))
        self.flush_every_s = check_positive("flush_every_s", flush_every_s)
        self._file: _EventFile | None = None  # while a fit runs

    def _open(self, info: Event) -> None:
        from torch.utils.tensorboard.summary import text

        self._file = _EventFile(self.log_dir / str(info.get("run") or "run"))
        start = info.get("start_step", 0)
        if start == 0:  # a resumed fit keeps the config text it has
            trained = {key: info[key] for key in ("model", "samples") if key in info}  # what, on what
            config = json.dumps({**info.get("config", {}), **trained}, indent=2, default=str)
            self._file.write(text("config", f"```\n{config}\n```"), 0)
        else:  # TensorBoard forgets what an earlier try logged past the checkpoint: the resume redoes it
            self._file.restart_at(start + 1)
        self._file.flush()

    def _write_step(self, numbers: dict[str, float], event: Event) -> None:
        self._file.write_scalars({f"train/{k}": v for k, v in numbers.items()}, event["step"])
        if time.monotonic() - self._file.flushed_at >= self.flush_every_s:
            self._file.flush()

    def _write_eval(self, numbers: dict[str, float], event: Event) -> None:
        split = event.get("split", "val")
        self._file.write_scalars({f"{split}/{k}": v for k, v in numbers.items()}, event["step"])
        self._file.flush()

    def _close(self, summary: Event) -> None:
        file, self._file = self._file, None
        file.close()

    def _release(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()


class _EventFile:
    """One TensorBoard event file written on the calling thread: records framed by TensorBoard's own
    `RecordWriter` into a buffered file, flushed when asked. (torch's `SummaryWriter` hands every event to
    a writer thread: ~130 µs of thread hand-over per logged step and ~7 ms of that thread's CPU on the
    benchmark's run, against ~20 µs here.)"""

    def __init__(self, folder: Path) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event, self._summary, self._session = event_pb2.Event, summary_pb2.Summary, event_pb2.SessionLog
        folder.mkdir(parents=True, exist_ok=True)
        now = time.time()
        name = f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}.{time.time_ns()}"
        self._records = RecordWriter(open(folder / name, "wb"))  # noqa: SIM115 (closed by close())
        self._records.write(self._event(wall_time=now, file_version="brain.Event:2").SerializeToString())
        self.flushed_at = time.monotonic()

    def write(self, summary: Any, step: int) -> None:
        event = self._event(wall_time=time.time(), step=step, summary=summary)
        self._records.write(event.SerializeToString())

    def restart_at(self, step: int) -> None:
        """A session restart at `step` (as `SummaryWriter(purge_step=step)` writes it): TensorBoard drops the
        events this run's earlier files hold from `step` on."""
        start = self._event(step=step, session_log=self._session(status=self._session.START))
        self._records.write(start.SerializeToString())

    def write_scalars(self, scalars: dict[str, float], step: int) -> None:
        """One event holding every scalar (as `add_scalar` per value would write, as float32)."""
        values = [self._summary.Value(tag=tag, simple_value=value) for tag, value in scalars.items()]
        self.write(self._summary(value=values), step)

    def flush(self) -> None:
        self._records.flush()
        self.flushed_at = time.monotonic()

    def close(self) -> None:
        self._records.close()
