"""The runs under a runs directory, read back from their logs: a summary of each, and what differs.

Each run directory holds ``metrics.jsonl`` (`MetricsLog`) and ``config.json``; `list_runs` summarises each
(status, steps, best validation metric, wall time, strategy, world size), `config_diff` keeps only the
config fields that differ between runs, and `metric_series` gives one logged metric of a run against step
or wall time. `workbench runs` prints them in a terminal; the `RunsBrowser` widget draws them.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from workbench.train.metrics_log import METRICS_FILE, read_metrics
from workbench.train.run_files import CONFIG_FILE
from workbench.train.run_lock import RunInUseError, RunLock
from workbench.train.trained_what import ModelSummary, model_text

STEP_KEYS = ("step", "epoch", "rank", "time", "event", "memory", "timeline")

Events: TypeAlias = list[dict[str, Any]]
Run: TypeAlias = "str | os.PathLike[str] | Events"  # a run directory, or the events already read from it


def read_run(path: str | os.PathLike) -> Events:
    """Every readable event of a run directory (a malformed line is skipped without a warning: a summary
    says what is readable)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_metrics(path)


def _events(run: Run) -> Events:
    return run if isinstance(run, list) else read_run(run)


@dataclass(frozen=True)
class RunSummary:
    """One run as its log tells it (the last fit, when it was resumed several times).

    `status` is the last fit's: finished, stopped, failed, running (a live process holds the run), or
    killed (no end was logged and nobody holds the run: the process died).
    """

    name: str
    path: Path
    status: str
    started: float | None  # unix time of the first fit's start
    steps: int
    epochs: int
    wall_s: float | None  # from the first start to the last event logged
    strategy: str
    world_size: int
    best: tuple[str, float] | None  # (val metric, its best value): accuracy when logged, else the val loss
    config: dict[str, Any] = field(default_factory=dict)
    global_batch: int | None = None  # samples per optimizer step over all ranks (None: an older log)
    model: ModelSummary | None = None  # the model trained (None: an older log)
    samples: dict[str, Any] = field(default_factory=dict)  # split → its samples (empty: an older log)

    def settings(self) -> dict[str, Any]:
        """The config's fields (dotted), what the launch made of them (ranks, strategy, global batch), and
        what was trained: the model (class, parameters, layer digest) and each split's samples."""
        derived = {"ranks": self.world_size, "strategy": self.strategy, "global batch": self.global_batch}
        trained = {"model": model_text(self.model)} if self.model is not None else {}
        trained.update({f"samples.{split}": count for split, count in self.samples.items()})
        return {**flatten_config(self.config), **derived, **trained}

    def row(self) -> list[str]:
        """The summary as table cells (see `RUN_COLUMNS`)."""
        best = "" if self.best is None else f"{self.best[0]} {self.best[1]:.4g}"
        wall = "" if self.wall_s is None else _seconds_text(self.wall_s)
        started = "" if self.started is None else _clock(self.started)
        model = (
            "" if self.model is None else f"{self.model['name']} {_parameters_text(self.model['parameters'])}"
        )
        return [
            self.name,
            started,
            self.status,
            model,
            str(self.steps),
            best,
            wall,
            self.strategy,
            str(self.world_size),
        ]


def _seconds_text(seconds: float) -> str:
    """Three significant digits, so that a short run does not read 0.0 s: "0.0412 s", "12.3 s", "4,321 s"."""
    return f"{seconds:.3g} s" if seconds < 1000 else f"{seconds:,.0f} s"


def _parameters_text(count: int | None) -> str:
    """A parameter count in three digits: "704", "25.4k", "1.21M", "7.24B"; "lazy" before initialisation."""
    if count is None:
        return "lazy"
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return str(count)


RUN_COLUMNS = ["run", "started", "status", "model", "steps", "best val", "wall time", "strategy", "ranks"]


def list_runs(
    runs_dir: str | os.PathLike = "runs",
    *,
    read: Callable[[Path], Events] = read_run,
    on_skip: Callable[[Path, str], None] | None = None,
) -> list[RunSummary]:
    """Every run under `runs_dir` with a metrics log, oldest first; `read` reads a run directory's events
    (a caching reader lets a widget read each log once per refresh). A run whose files cannot be read or
    summarised is left out and `on_skip(path, why)` called (default: a warning), so that one damaged run
    never hides the others.

    Example:
        >>> import tempfile
        >>> from workbench.presets import build_experiment
        >>> from workbench.train import Trainer
        >>> runs = tempfile.mkdtemp()
        >>> for lr in (0.01, 0.003):
        ...     e = build_experiment("digits-mlp", epochs=1, lr=lr)
        ...     _ = Trainer(e.model, e.loss_fn, e.splits, e.config, run=f"lr={lr}", runs_dir=runs).fit()
        >>> [(r.name, r.status, r.steps) for r in list_runs(runs)]
        [('lr=0.01', 'finished', 23), ('lr=0.003', 'finished', 23)]
        >>> config_diff(list_runs(runs))
        {'optimizer.lr': [0.01, 0.003]}
    """
    root = Path(runs_dir).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"no runs directory at {root}; train with run= (and runs_dir=) first")
    paths = [path for path in sorted(root.iterdir()) if (path / METRICS_FILE).is_file()]
    summaries = []
    for path in paths:
        try:
            summaries.append(summarize_run(path, read(path)))
        except Exception as error:  # anything a damaged or foreign file makes the summary raise
            why = f"its {METRICS_FILE} cannot be summarised ({type(error).__name__}: {error})"
            if isinstance(error, OSError):
                why = f"its {METRICS_FILE} cannot be read ({error.strerror or error})"
            (on_skip or _warn_skipped)(path, why)
    return sorted(summaries, key=lambda r: (r.started is None, r.started or 0.0, r.name))


def _warn_skipped(path: Path, why: str) -> None:
    warnings.warn(f"skipped the run {path}: {why}", stacklevel=3)


def summarize_run(path: str | os.PathLike, events: Events | None = None) -> RunSummary:
    """The `RunSummary` of one run directory (from its `events` when already read)."""
    path = Path(path)
    events = read_run(path) if events is None else events
    starts = [e for e in events if e["event"] == "fit_start"]
    last_start = max((i for i, e in enumerate(events) if e["event"] == "fit_start"), default=-1)
    end = next((e for e in events[last_start + 1 :] if e["event"] == "fit_end"), None)
    steps = [e for e in events if e["event"] == "step"]
    times = [e["time"] for e in events if _finite(e.get("time"))]
    first = starts[0] if starts else {}
    last = starts[-1] if starts else {}
    started = first.get("time") if _finite(first.get("time")) else (min(times) if times else None)
    latest = end or (steps[-1] if steps else {})
    status = end.get("status") if end is not None else _unfinished_status(path)
    return RunSummary(
        name=path.name,
        path=path,
        status=status if isinstance(status, str) and status else "unknown",  # a log written by hand
        started=started,
        steps=_count(latest.get("step")),
        epochs=_count(latest.get("epoch")),
        wall_s=(max(times) - started) if times and started is not None else None,
        strategy=str(last.get("strategy", "")),
        world_size=_count(last.get("world_size"), default=1),
        best=_best_val(events),
        config=_config(path, last),
        global_batch=_count(last.get("global_batch")) if "global_batch" in last else None,
        model=_model(last.get("model")),
        samples=_samples(last.get("samples")),
    )


def config_diff(runs: list[RunSummary]) -> dict[str, list[Any]]:
    """The settings (config fields, dotted, e.g. ``optimizer.lr``, and the derived ``ranks``, ``strategy``
    and ``global batch``) whose values differ between `runs`, each with the runs' values in order; those
    the same everywhere are left out."""
    flat = [run.settings() for run in runs]
    names = sorted({name for config in flat for name in config})
    return {
        name: [config.get(name) for config in flat]
        for name in names
        if len({json.dumps(config.get(name), sort_keys=True, default=str) for config in flat}) > 1
    }


def metric_names(run: Run) -> list[str]:
    """The numeric metrics a run logged: step fields (``loss``, ``lr``...), evaluations (``val loss``)."""
    names: dict[str, None] = {}
    for event in _events(run):
        if event["event"] == "step" and event.get("rank", 0) == 0:
            prefix = ""
        elif event["event"] == "eval":
            prefix = f"{event.get('split')} "
        else:
            continue
        for key, value in event.items():
            if key not in STEP_KEYS and key != "split" and _number(value):
                names[prefix + key] = None
    return list(names)


def metric_series(run: Run, metric: str, *, x: str = "step") -> tuple[list[float], list[float]]:
    """One metric of a run (a name from `metric_names`) against ``x="step"`` or ``"time"`` (seconds since
    the first event)."""
    if x not in ("step", "time"):
        raise ValueError(f"x={x!r} is not supported; allowed values: 'step', 'time'")
    events = _events(run)
    times = [e["time"] for e in events if _number(e.get("time"))]
    t0 = min(times) if times else 0.0
    split, _, name = (
        metric.partition(" ") if metric.startswith(("val ", "test ", "train ")) else ("", "", metric)
    )
    xs, ys = [], []
    for event in events:
        if split:
            matches = event["event"] == "eval" and event.get("split") == split
        else:
            matches = event["event"] == "step" and event.get("rank", 0) == 0
        value, at = event.get(name), event.get(x)
        if matches and _number(value) and _finite(at):  # a step or time the log mangled: not drawn
            xs.append(float(at) if x == "step" else float(at) - t0)
            ys.append(float(value))
    return xs, ys


def _unfinished_status(path: Path) -> str:
    lock = RunLock(path)
    try:
        lock.acquire()
    except RunInUseError:
        return "running"
    lock.release()
    return "killed"


def _best_val(events: list[dict[str, Any]]) -> tuple[str, float] | None:
    evals = [e for e in events if e["event"] == "eval" and e.get("split") == "val"]
    for name, better in (("accuracy", max), ("loss", min)):
        values = [e[name] for e in evals if _number(e.get(name))]
        if values:
            return name, float(better(values))
    return None


def _config(path: Path, start: dict[str, Any]) -> dict[str, Any]:
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        config = start.get("config")
    return config if isinstance(config, dict) else {}  # a list or null is no config: nothing to compare


def _model(logged: Any) -> ModelSummary | None:
    """The logged model summary, or None (an older log, or one damaged or written by hand)."""
    count = logged.get("parameters", "") if isinstance(logged, dict) else ""
    if not isinstance(logged, dict) or not (count is None or isinstance(count, int)):
        return None
    return ModelSummary(
        name=str(logged.get("name", "")), parameters=count, digest=str(logged.get("digest", ""))
    )


def _samples(logged: Any) -> dict[str, Any]:
    if not isinstance(logged, dict):
        return {}
    return {str(split): count for split, count in logged.items() if count is None or _number(count)}


def flatten_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config fields as dotted names: ``{"optimizer": {"lr": 0.1}}`` → ``{"optimizer.lr": 0.1}``."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flatten_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return _number(value) and math.isfinite(value)


def _count(value: Any, default: int = 0) -> int:
    """A step, epoch or rank count as logged, or `default` where the log holds something else."""
    return int(value) if _finite(value) and value >= 0 else default


def _clock(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(unix))
