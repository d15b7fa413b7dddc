"""Watch a run that another process writes (torchrun on a cluster, a script): its metrics log as live events.

    plot = LossPlot()
    follower = follow_metrics("runs/big-job", [plot])   # replays what is there, then follows new lines
    plot                                                # fills in as rank 0 appends to metrics.jsonl
    follower.wait()                                     # returns once the run's fit_end is read

The job's rank 0 writes ``runs/<run>/metrics.jsonl`` (`MetricsLog`); this reads new complete lines every
`interval` seconds in a daemon thread and calls the callbacks' hooks with the same dicts the trainer sent. A
log started over (a fresh fit under the same name) is read from its beginning again. A malformed line (cut
short by a killed writer, garbage) is skipped and counted (`Follower.skipped`), and a callback that raises
is recorded (`Follower.errors`): following goes on either way.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

from workbench._validate import check_positive
from workbench.train.events import Callback, CallbackList
from workbench.train.metrics_log import METRICS_FILE, parse_line

_HEAD_BYTES = 256
_HOOKS = {"fit_start": "on_fit_start", "step": "on_step", "eval": "on_eval", "fit_end": "on_fit_end"}


class Follower:
    """The thread behind `follow_metrics`; `stop` it, or `wait` for the run's end.

    Example (a log another process wrote, one line of it torn):
        >>> import json, tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> events = [{"event": "fit_start", "start_step": 0}, {"event": "step", "step": 1, "loss": 0.5}]
        >>> lines = [json.dumps(event) for event in events] + ['{"event": "st', '{"event": "fit_end"}']
        >>> _ = (run / "metrics.jsonl").write_text("\\n".join(lines) + "\\n")
        >>> class Losses:
        ...     seen = []
        ...     def on_step(self, event):
        ...         self.seen.append(event["loss"])
        >>> follower = follow_metrics(run, [Losses()], interval=0.05)
        >>> follower.wait(timeout=10), Losses.seen, follower.skipped, follower.errors
        (True, [0.5], 1, [])
        >>> follower.stop()
    """

    def __init__(self, path: Path, callbacks: Iterable[Callback], interval: float) -> None:
        self.path = path
        self.events = CallbackList(callbacks)
        self.interval = check_positive("interval", interval)
        self.finished = threading.Event()  # a fit_end was read
        self.skipped = 0  # malformed lines passed over
        self.errors: list[str] = []  # callbacks that raised, as "hook: Type: message"
        self._stop = threading.Event()
        self._offset = 0  # the end of the last complete line read: a torn line is read again from its start
        self._head = b""  # the log's first bytes: if they change, the log was rewritten
        self._lock = threading.Lock()  # one reader at a time: the thread, or a caller of poll
        self._thread = threading.Thread(target=self._run, name="workbench-follow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop following (what was read stays delivered)."""
        self._stop.set()
        self._thread.join()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run's ``fit_end`` is read (True) or `timeout` seconds pass (False)."""
        return self.finished.wait(timeout)

    def poll(self) -> int:
        """Read and deliver the complete lines written since the last poll; returns how many."""
        with self._lock:
            return self._read_new_lines()

    def _read_new_lines(self) -> int:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return 0
        with self.path.open("rb") as file:
            head = file.read(len(self._head))
            if size < self._offset or head != self._head:  # the log was started over (a fresh fit)
                self._offset, self._head = 0, b""
            if not self._head:
                file.seek(0)
                self._head = file.read(_HEAD_BYTES)
            file.seek(self._offset)
            data = file.read()
        *lines, partial = data.split(b"\n")  # a line still being written, or one a resume cuts off
        self._offset += len(data) - len(partial)
        self._head = self._head[: self._offset]  # complete lines only: a cut fragment is no rewrite
        delivered = 0
        for line in lines:
            if not line.strip():
                continue
            record = parse_line(line)
            if record is None:
                self.skipped += 1
                continue
            self._deliver(record)
            delivered += 1
        return delivered

    def _deliver(self, record: dict) -> None:
        kind = record.pop("event", None)
        if kind not in _HOOKS:
            return
        try:
            getattr(self.events, _HOOKS[kind])(record)
        except Exception as error:  # a broken view must not end the following
            self.errors.append(f"{_HOOKS[kind]}: {type(error).__name__}: {error}")
        if kind == "fit_end":
            self.finished.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval)
        self.poll()


def follow_metrics(
    run: str | os.PathLike, callbacks: Iterable[Callback], *, interval: float = 0.5
) -> Follower:
    """Deliver the events of run directory `run` (or its ``metrics.jsonl``) to `callbacks` as they appear.

    The log need not exist yet; reading starts when it does.

    Example:
        >>> import tempfile
        >>> from workbench.train import MetricsLog
        >>> run = Path(tempfile.mkdtemp())
        >>> log = MetricsLog(run)
        >>> log.on_fit_start({"start_step": 0})
        >>> log.on_fit_end({"status": "finished"})
        >>> seen = []
        >>> class Seen(Callback):
        ...     def on_fit_end(self, summary):
        ...         seen.append(summary["status"])
        >>> follower = follow_metrics(run, [Seen()], interval=0.05)
        >>> follower.wait(5), seen
        (True, ['finished'])
        >>> follower.stop()
    """
    path = Path(run)
    if path.is_dir() or path.suffix != ".jsonl":
        path = path / METRICS_FILE
    return Follower(path, callbacks, interval)
