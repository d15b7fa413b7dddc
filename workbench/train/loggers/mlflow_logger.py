"""`MLflowLogger`: a run's params, metrics and (when asked) checkpoint in MLflow (the ``mlflow`` extra)."""

from __future__ import annotations

import os
import socket
import time
import urllib.parse
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from workbench._validate import check_positive
from workbench.train.events import Event
from workbench.train.loggers.rank_zero import RankZeroLogger
from workbench.train.runs import flatten_config
from workbench.train.trained_what import model_text

_RUN_TAG = "workbench.run"  # the workbench run name: a resumed fit continues the MLflow run holding it
_STATUS = {"finished": "FINISHED", "stopped": "KILLED", "failed": "FAILED"}
_BATCH = 1000  # MLflow's limit of metrics per log_batch call
_PARAMS_BATCH = 100  # and of params
_IN_FLIGHT = 64  # batches sent and not yet checked


class MLflowLogger(RankZeroLogger):
    """Logs each fit as an MLflow run: the config as params, every step and evaluation metric by step.

    Step fields go to ``train/<name>`` (``train/loss``, ``train/lr``, ``train/grad_norm``,
    ``train/samples_per_s``), evaluations to ``<split>/<metric>`` (``val/loss``, ``val/accuracy``); the
    MLflow run is named after ``Trainer(run=...)``, carries the strategy and world size as tags, and ends
    FINISHED, KILLED (stopped) or FAILED. A resumed fit continues the MLflow run of the same name. The
    run is created, and metrics (queued on the training thread) are sent in batches, by a background thread
    of the logger's own: every `flush_every_s` seconds while the fit runs and at its end, the config's params
    with the first batch. The fit waits for MLflow only at its end. Each batch is a database transaction
    (~10 ms of CPU in MLflow's SQLite store); MLflow's own asynchronous logging would wait up to a second
    for its thread at the end of every run.

    Open them with ``mlflow ui --backend-store-uri sqlite:///runs/mlflow.db --host 127.0.0.1``.

    Args:
        tracking_uri: a file path (a local SQLite store, created with its parent folder; artifacts go to
            ``mlartifacts/`` beside it), or any MLflow tracking URI (``http://127.0.0.1:5000``,
            ``sqlite:///...``, ``databricks``).
        experiment: the MLflow experiment, created when missing.
        log_checkpoint: also upload the fit's last checkpoint as the artifact ``checkpoint/checkpoint.pt``.
        flush_every_s: longest time metrics wait in the queue while steps come, > 0.

    Example:
        >>> import tempfile
        >>> from mlflow import MlflowClient
        >>> from workbench.presets import build_experiment
        >>> from workbench.train import Trainer
        >>> store = f"{tempfile.mkdtemp()}/mlflow.db"
        >>> e = build_experiment("digits-mlp", epochs=1)
        >>> trainer = Trainer(e.model, e.loss_fn, e.splits, e.config, callbacks=[MLflowLogger(store)],
        ...                   run="a", runs_dir=tempfile.mkdtemp())
        >>> _ = trainer.fit()
        >>> client = MlflowClient(f"sqlite:///{store}")
        >>> [run] = client.search_runs([client.get_experiment_by_name("workbench").experiment_id])
        >>> run.info.run_name, run.info.status, run.data.params["epochs"]
        ('a', 'FINISHED', '1')
    """

    extra = module = "mlflow"

    def __init__(
        self,
        tracking_uri: str | os.PathLike = "runs/mlflow.db",
        *,
        experiment: str = "workbench",
        log_checkpoint: bool = False,
        flush_every_s: float = 5.0,
    ) -> None:
        self.tracking_uri, self._artifacts = _tracking_uri(tracking_uri)
        if not isinstance(experiment, str) or not experiment.strip():
            raise ValueError(f"experiment must be a non-empty name, got {experiment!r}")
        super().__init__(self.tracking_uri)
        self.experiment = experiment
        self.log_checkpoint = bool(log_checkpoint)
        self.flush_every_s = check_positive("flush_every_s", flush_every_s)
        self.run_id: str | None = None  # the MLflow run of the current (or last) fit
        self._client: Any = None
        self._queue: list[Any] = []
        self._sender: ThreadPoolExecutor | None = None  # one thread: batches reach MLflow in order
        self._sent: list[Future[Any]] = []  # batches handed to the sender and not yet checked
        self._flushed_at = 0.0
        self._unsent_params: list[Any] = []  # the config, sent with the first batch (on the sender)
        self._metric: Any = None  # mlflow.entities.Metric, imported when a fit starts

    def _open(self, info: Event) -> None:
        from mlflow import MlflowClient
        from mlflow.entities import Metric

        _check_reachable(self.tracking_uri)  # MLflow would retry for minutes, and the fit wait at its end
        if self._artifacts is not None:  # here, not in __init__: a folder it cannot make is one warning
            self._artifacts.mkdir(parents=True, exist_ok=True)
        self._metric = Metric
        self._client = MlflowClient(tracking_uri=self.tracking_uri)
        self._sender = ThreadPoolExecutor(1, thread_name_prefix="workbench-mlflow")
        self._sent.append(self._sender.submit(self._start_run, dict(info)))  # the fit does not wait for it
        self._flushed_at = time.monotonic()

    def _start_run(self, info: Event) -> None:
        """On the sender: find or create the MLflow run; its params go with the first batch of metrics."""
        from mlflow.entities import Param

        experiment_id = self._experiment_id()
        name = str(info.get("run") or "run")
        resumed = self._run_to_continue(experiment_id, name) if info.get("start_step", 0) > 0 else None
        if resumed is not None:
            self.run_id = resumed
            self._client.update_run(resumed, status="RUNNING")
        else:
            tags = {_RUN_TAG: name, "strategy": info.get("strategy"), "world_size": info.get("world_size")}
            run = self._client.create_run(
                experiment_id, run_name=name, tags={k: str(v) for k, v in tags.items() if v is not None}
            )
            self.run_id = run.info.run_id
            params = _params({**info.get("config", {}), **_trained(info)})
            self._unsent_params = [Param(k, v) for k, v in params.items()]

    def _write_step(self, numbers: dict[str, float], event: Event) -> None:
        self._queue_metrics("train", numbers, event)
        if time.monotonic() - self._flushed_at >= self.flush_every_s:
            self._flush()

    def _write_eval(self, numbers: dict[str, float], event: Event) -> None:
        self._queue_metrics(event.get("split", "val"), numbers, event)
        if time.monotonic() - self._flushed_at >= self.flush_every_s:
            self._flush()

    def _close(self, summary: Event) -> None:
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.shutdown(wait=True)  # the run's creation and batches in flight
        sent, self._sent = self._sent, []
        for batch in sent:
            batch.result()  # raises what the sender met
        queued, self._queue = self._queue, []
        for batch in _batches(queued):  # here: the sender would only be waited for
            self._send(batch)
        checkpoint = summary.get("checkpoint")
        if self.log_checkpoint and checkpoint and Path(checkpoint).is_file():
            self._client.log_artifact(self.run_id, checkpoint, artifact_path="checkpoint")
        if summary.get("error"):
            self._client.set_tag(self.run_id, "error", str(summary["error"])[:5000])
        self._client.set_terminated(self.run_id, status=_STATUS.get(summary.get("status"), "FINISHED"))

    def _release(self) -> None:
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.shutdown(wait=False, cancel_futures=True)
        self._queue, self._sent = [], []

    def _queue_metrics(self, prefix: str, numbers: dict[str, float], event: Event) -> None:
        stamp = int(1000 * event.get("time", time.time()))
        metric = self._metric
        self._queue.extend(metric(f"{prefix}/{k}", v, stamp, event["step"]) for k, v in numbers.items())

    def _flush(self) -> None:
        queued, self._queue = self._queue, []
        for batch in _batches(queued):
            self._sent.append(self._sender.submit(self._send, batch))
        while len(self._sent) > _IN_FLIGHT or (self._sent and self._sent[0].done()):
            self._sent.pop(0).result()  # raises what the sender met; waits only if MLflow falls behind
        self._flushed_at = time.monotonic()

    def _send(self, metrics: list[Any]) -> None:
        """On the sender: one database transaction (or request) with `metrics` and the params not yet sent
        (more than one call holds go in calls of their own)."""
        params, self._unsent_params = self._unsent_params, []
        if metrics or params:
            self._client.log_batch(self.run_id, metrics=metrics, params=params[:_PARAMS_BATCH])
        for start in range(_PARAMS_BATCH, len(params), _PARAMS_BATCH):
            self._client.log_batch(self.run_id, params=params[start : start + _PARAMS_BATCH])

    def _experiment_id(self) -> str:
        found = self._client.get_experiment_by_name(self.experiment)
        if found is not None:
            return found.experiment_id
        location = None if self._artifacts is None else self._artifacts.as_uri()
        return self._client.create_experiment(self.experiment, artifact_location=location)

    def _run_to_continue(self, experiment_id: str, name: str) -> str | None:
        quoted = name.replace("\\", "\\\\").replace("'", "\\'")
        runs = self._client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{_RUN_TAG}` = '{quoted}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        return runs[0].info.run_id if runs else None


def _batches(metrics: list[Any]) -> list[list[Any]]:
    """`metrics` in calls MLflow accepts (≤ 1000 each); one empty batch when there are none (it may carry
    the params)."""
    return [metrics[start : start + _BATCH] for start in range(0, max(len(metrics), 1), _BATCH)]


def _tracking_uri(target: Any) -> tuple[str, Path | None]:
    """(the URI MLflow is given, the artifact folder to create for a local store or None)."""
    if isinstance(target, os.PathLike) or (isinstance(target, str) and "://" not in target and target):
        if isinstance(target, str) and target in {"databricks", "databricks-uc", "uc"}:
            return target, None
        path = Path(target).expanduser().resolve()
        if path.is_dir():
            raise ValueError(
                f"tracking_uri {str(target)!r} is a folder; give the SQLite file to create in it, e.g. "
                f"{str(path / 'mlflow.db')!r}, or a tracking URI such as 'http://127.0.0.1:5000'"
            )
        return f"sqlite:///{path}", path.parent / "mlartifacts"
    if isinstance(target, str) and target:
        return target, None
    raise ValueError(
        f"tracking_uri must be a file path (a local SQLite store) or an MLflow tracking URI, got {target!r}"
    )


def _check_reachable(tracking_uri: str, timeout_s: float = 3.0) -> None:
    """ConnectionError unless a TCP connection to an http(s) tracking server opens within `timeout_s`."""
    parts = urllib.parse.urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConnectionError(f"no MLflow server answers at {parts.hostname}:{port} ({reason})") from None


def _trained(info: Event) -> dict[str, Any]:
    """What the fit trains (the model, each split's samples) as params beside the config's."""
    what: dict[str, Any] = {"samples": info["samples"]} if "samples" in info else {}
    return {"model": model_text(info["model"]), **what} if "model" in info else what


def _params(config: dict[str, Any]) -> dict[str, str]:
    """``{"optimizer": {"lr": 0.1}}`` → ``{"optimizer.lr": "0.1"}``: dotted names (as `workbench runs --diff`
    shows them), values as MLflow keeps them (text, ≤ 6000 characters)."""
    return {name: str(value)[:6000] for name, value in flatten_config(config).items()}
