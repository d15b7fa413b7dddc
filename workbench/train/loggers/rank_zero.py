"""What every logger shares: rank 0's events only, numbers only, and a failure that never stops training."""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

from workbench._distribution import pip_install
from workbench.train.events import Callback, Event, evaluation_metrics

NOT_METRICS = frozenset({"step", "epoch", "rank", "time"})


class RankZeroLogger(Callback):
    """Base of the loggers: subclasses implement `_open`, `_write_step`, `_write_eval` and `_close`.

    Rank 0 logs for everyone (its losses are the means over ranks). The first exception any of those raises
    is caught: one warning naming the logger, where it logs and why, then nothing more is sent; the
    training loop and ``metrics.jsonl`` never see it. ``failed`` keeps the reason.
    """

    #: the pip extra that provides the tool, and the module that tells it is installed
    extra: str = ""
    module: str = ""

    def __init__(self, destination: str) -> None:
        self.destination = destination  # where the logs go, for messages
        self.failed: str | None = None
        self._logging = False
        _require(type(self).__name__, self.module, self.extra)

    def on_fit_start(self, info: Event) -> None:
        if info.get("rank", 0) == 0:
            self._logging = self._safely(self._open, info)

    def on_step(self, metrics: Event) -> None:
        if self._logging and metrics.get("rank", 0) == 0:
            numbers = {k: float(v) for k, v in metrics.items() if k not in NOT_METRICS and _number(v)}
            self._safely(self._write_step, numbers, metrics)

    def on_eval(self, metrics: Event) -> None:
        if self._logging and metrics.get("rank", 0) == 0:
            self._safely(self._write_eval, evaluation_metrics(metrics), metrics)

    def on_fit_end(self, summary: Event) -> None:
        if self._logging and summary.get("rank", 0) == 0:
            self._logging = False
            self._safely(self._close, summary)

    def _open(self, info: Event) -> None:
        raise NotImplementedError

    def _write_step(self, numbers: dict[str, float], event: Event) -> None:
        raise NotImplementedError

    def _write_eval(self, numbers: dict[str, float], event: Event) -> None:
        raise NotImplementedError

    def _close(self, summary: Event) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        """Let go of what `_open` holds (threads, files) after a failure, without raising."""

    def _safely(self, action: Any, *args: Any) -> bool:
        """Run `action`; False (after one warning) once anything it or an earlier action raised."""
        if self.failed is not None:
            return False
        try:
            action(*args)
        except Exception as error:  # a logger never stops training
            self.failed = f"{type(error).__name__}: {error}"
            self._logging = False
            self._release()
            warnings.warn(
                f"{type(self).__name__} stopped logging to {self.destination} ({self.failed}); training goes "
                "on and metrics.jsonl keeps every event",
                stacklevel=3,
            )
            return False
        return True


def _require(logger: str, module: str, extra: str) -> None:
    if module and importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(
            f"{logger} needs the {module} package, which is not installed: {pip_install(extra)}, "
            f"or pip install {module}"
        )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
