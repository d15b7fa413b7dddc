"""The per-run metrics log: every event as one JSON line in ``runs/<name>/metrics.jsonl``.

Runs can be compared and plotted again later without re-training: `read_metrics` gives the events back.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import IO, Any

from workbench.train.events import Callback, Event
from workbench.train.run_files import explain_write_failure, open_run_file

METRICS_FILE = "metrics.jsonl"
_FLUSH_EVERY_S = 1.0


class MetricsLog(Callback):
    """Writes each event to ``<run_dir>/metrics.jsonl`` as ``{"event": kind, ...metrics}``.

    A fresh fit (``start_step == 0``) starts the log over; a resumed fit appends to it, after cutting the
    last line where a killed writer left it torn (else that fragment and the resume's ``fit_start`` would
    read as one malformed line). Lines are flushed at each evaluation, at the end, and at least once a
    second while steps come (so `follow_metrics` sees them).

    Example (a loop of your own writing a run that `workbench runs` and the runs browser read):
        >>> import tempfile
        >>> run = tempfile.mkdtemp()
        >>> log = MetricsLog(run)
        >>> log.on_fit_start({"start_step": 0})
        >>> log.on_step({"step": 1, "epoch": 0, "loss": 0.5})
        >>> log.on_fit_end({"status": "finished", "step": 1})
        >>> [event["event"] for event in read_metrics(run)]
        ['fit_start', 'step', 'fit_end']
    """

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self._file: IO[str] | None = None
        self._flushed_at = time.monotonic()

    def on_fit_start(self, info: Event) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append = info["start_step"] > 0
        flags = os.O_RDWR | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        descriptor = open_run_file(self.path, flags)
        if append:
            cut_torn_line(descriptor)
        self._file = os.fdopen(descriptor, "a" if append else "w", encoding="utf-8")
        self._write("fit_start", info, flush=True)

    def on_step(self, metrics: Event) -> None:
        now = time.monotonic()
        flush = now - self._flushed_at >= _FLUSH_EVERY_S  # so a follower sees steps while an epoch runs
        self._write("step", metrics, flush=flush)
        if flush:
            self._flushed_at = now

    def on_eval(self, metrics: Event) -> None:
        self._write("eval", metrics, flush=True)

    def on_fit_end(self, summary: Event) -> None:
        self._write("fit_end", summary, flush=True)
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write(self, kind: str, data: Event, *, flush: bool = False) -> None:
        if self._file is None:
            return
        try:
            self._file.write(json.dumps({"event": kind, **_jsonable(data)}) + "\n")
            if flush:
                self._file.flush()
        except OSError as error:  # a full disk, a file-size limit: training stops, saying which and why
            file, self._file = self._file, None
            with contextlib.suppress(OSError):
                file.close()
            raise OSError(error.errno, explain_write_failure(self.path, error)) from None


def cut_torn_line(descriptor: int, chunk: int = 4096) -> int:
    """Truncate the file open at `descriptor` after its last newline: a process killed mid-write (SIGKILL,
    the OOM killer, a lost node) leaves a line cut short, which no reader can use. Returns the bytes cut.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryFile() as file:
        ...     _ = file.write(b'{"event": "step"}\\n{"event": "st')
        ...     file.flush()
        ...     cut_torn_line(file.fileno()), file.seek(0), file.read()
        (13, 0, b'{"event": "step"}\\n')
    """
    size = end = os.fstat(descriptor).st_size
    while end > 0:
        start = max(0, end - chunk)
        newline = os.pread(descriptor, end - start, start).rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    if end < size:
        os.ftruncate(descriptor, end)
    return size - end


def read_metrics(run: str | os.PathLike, kind: str | None = None, *, superseded: bool = False) -> list[Event]:
    """Events of a run (a run directory or its ``metrics.jsonl``), optionally only one `kind`.

    `kind` is ``"fit_start"``, ``"step"``, ``"eval"`` or ``"fit_end"``. A fit resumed from a checkpoint at
    step s redoes the steps after s that an earlier try logged before it failed (a crash, a non-finite
    loss, a restarted worker): their step and eval events are left out, so the run reads as it stands,
    unless `superseded` (every line as logged; the file keeps them all).

    Example:
        >>> import tempfile, torch, torch.nn.functional as F
        >>> from torch.utils.data import TensorDataset
        >>> from workbench.train import TrainConfig, Trainer
        >>> data, runs = TensorDataset(torch.randn(64, 3), torch.arange(64) % 2), tempfile.mkdtemp()
        >>> _ = Trainer(torch.nn.Linear(3, 2), F.cross_entropy, (data, data), TrainConfig(epochs=2,
        ...             batch_size=16), run="demo", runs_dir=runs, progress=False).fit()
        >>> [event["event"] for event in read_metrics(f"{runs}/demo")]
        ['fit_start', 'step', 'eval', 'step', 'eval', 'fit_end']
        >>> [event["step"] for event in read_metrics(f"{runs}/demo", "eval")]
        [4, 8]
    """
    path = Path(run)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no metrics log at {path}")
    kinds = ("fit_start", "step", "eval", "fit_end")
    if kind is not None and kind not in kinds:
        raise ValueError(f"kind={kind!r} is not supported; allowed values: {', '.join(map(repr, kinds))}")
    events, bad = [], []
    with path.open("rb") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            event = parse_line(line)
            if event is None:
                bad.append(number)
            else:
                events.append(event)
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (" …" if len(bad) > 5 else "")
        warnings.warn(
            f"{path}: skipped {len(bad)} malformed line(s) (line {shown}): not a JSON event, e.g. cut short "
            "by a killed writer",
            stacklevel=2,
        )
    events = events if superseded else without_superseded(events)
    return events if kind is None else [event for event in events if event["event"] == kind]


def without_superseded(events: list[Event]) -> list[Event]:
    """`events` less the step and eval events a later resume redid: those past the step it started from.

    Example:
        >>> failed = [{"event": "step", "step": s} for s in (1, 2, 3)]  # a try that got to step 3
        >>> resumed = [{"event": "fit_start", "start_step": 2}, {"event": "step", "step": 3}]
        >>> [e.get("step") for e in without_superseded(failed + resumed)]
        [1, 2, None, 3]
    """
    kept, resumed_from = [], math.inf
    for event in reversed(events):
        if event["event"] == "fit_start":
            resumed_from = min(resumed_from, _step(event.get("start_step"), math.inf))
        elif event["event"] in ("step", "eval") and _step(event.get("step"), 0) > resumed_from:
            continue
        kept.append(event)
    return kept[::-1]


def _step(value: Any, mangled: float) -> float:
    """A logged step as a number; `mangled` where a damaged line holds another value (so it cuts nothing)."""
    number = isinstance(value, int | float) and not isinstance(value, bool) and value == value
    return value if number else mangled


def parse_line(line: bytes | str) -> Event | None:
    """One line of a metrics log as an event dict, or None when it is not one (bad UTF-8 or JSON, not an
    object, no ``"event"`` key): a reader skips such lines rather than failing.

    Example:
        >>> parse_line('{"event": "step", "step": 3}'), parse_line('{"event": "st'), parse_line("[1]")
        ({'event': 'step', 'step': 3}, None, None)
    """
    try:
        record = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("event"), str) else None


def _jsonable(value: Any) -> Any:
    """Plain JSON values; non-finite floats become strings ("nan", "inf") so the line stays valid JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)
