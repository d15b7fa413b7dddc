"""What a Spark run prints when a rank fails: one line per failed rank instead of torchrun's report and
Spark's Java stacks.

TorchDistributor runs each rank under torchrun and copies its output to the driver's stdout/stderr. When a
rank's process dies, its torchrun prints a ~30-line `ChildFailedError` traceback and failure report, and
Spark logs the failed task twice with a Java stack (Executor's ERROR, TaskSetManager's WARN). Their one
fact, which rank ended and how, becomes one line; everything else a rank prints (the user's own output
and tracebacks) passes through unchanged.

    >>> import io
    >>> out = io.StringIO()
    >>> report = TorchrunReports(out)
    >>> for line in ["Traceback (most recent call last):", '  File "run.py", line 1, in <module>',
    ...              "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", "=" * 20,
    ...              "train.py FAILED", "-" * 20, "Root Cause (first observed failure):", "[0]:",
    ...              "  rank      : 1 (local_rank: 0)", "  exitcode  : -9 (pid: 27162)  (SIGKILL)", "=" * 20]:
    ...     _ = report.write(line + "\\n")
    >>> print(out.getvalue(), end="")
    workbench: rank 1's process ended with exit code -9 (SIGKILL)
"""

from __future__ import annotations

import re
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

CHILD_FAILED = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
# torchrun's agent logs its child's exit before the report: "E1126 23:44:49.993000 27157 torch/...] failed"
AGENT_LOG_LINE = re.compile(r"^[EWI]\d{4} [\d:.]+ \d+ torch/distributed/elastic/.*\] failed \(exitcode")
# the first line each rank prints: pyspark (4.x) writes a task's first line to the executor's own stderr as
# well as streaming it to the driver, so on a local master it would show twice
STARTED = re.compile(r"^workbench: rank \d+ of \d+ runs on ")
OURS = re.compile(r"^workbench: ")  # a line of ours: never part of torchrun's traceback or report
# Spark's loggers that repeat a failed task's Python traceback with a Java stack under it
# TaskContextImpl: "Error in TaskCompletionListener" with a Java stack, when a killed rank's task is torn down
TASK_FAILURE_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.TaskContextImpl",
)


class TorchrunReports:
    """A text stream that passes lines on to `target`, except torchrun's failure reports: each becomes one
    ``workbench: rank R's process ended with exit code C`` line, and, with `drop_started`, the ranks' start
    lines. Thread-safe (Spark's log server writes from its own thread)."""

    def __init__(self, target: TextIO, drop_started: bool = False) -> None:
        self.target = target
        self.drop_started = drop_started
        self._pending = ""  # a line not ended yet
        self._traceback: list[str] = []  # a traceback held until its last line says whose it is
        self._report: dict[str, str] | None = None  # inside a report: what it said so far
        self._rules = 0
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._pending += text
            *lines, self._pending = self._pending.split("\n")
            for line in lines:
                self._line(line)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            self.target.flush()

    def close_report(self) -> None:
        """Pass on what is still held (a traceback cut short, a line without its newline)."""
        with self._lock:
            self._emit(*self._traceback)
            self._traceback = []
            if self._pending:
                self.target.write(self._pending)
                self._pending = ""
            self.target.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno: the target's
        return getattr(self.target, name)

    def _line(self, line: str) -> None:
        if OURS.match(line) and (self._report is not None or self._traceback):
            # another rank's line between the lines of this report (the ranks share the driver's stream)
            if not (self.drop_started and STARTED.match(line)):
                self._emit(line)
            return
        if self._report is not None:
            self._in_report(line)
        elif self._traceback:
            self._traceback.append(line)
            if line and not line[0].isspace() and not line.startswith("Traceback"):
                held, self._traceback = self._traceback, []
                if line.startswith(CHILD_FAILED):
                    self._report, self._rules = {}, 0
                else:
                    self._emit(*held)
        elif line.startswith("Traceback (most recent call last):"):
            self._traceback = [line]
        elif not AGENT_LOG_LINE.match(line) and not (self.drop_started and STARTED.match(line)):
            self._emit(line)

    def _in_report(self, line: str) -> None:
        assert self._report is not None
        key, _, value = line.partition(":")
        if key.strip() in ("rank", "exitcode"):
            self._report[key.strip()] = value.strip()  # the root cause comes last
        if line.startswith("====="):
            self._rules += 1
            if self._rules == 2:
                self._emit(_ended_line(self._report))
                self._report = None

    def _emit(self, *lines: str) -> None:
        for line in lines:
            self.target.write(line + "\n")


def _ended_line(report: dict[str, str]) -> str:
    rank = report.get("rank", "?").split(" ")[0]
    code = report.get("exitcode", "?")
    signal = re.search(r"\((SIG\w+)\)", code)
    code = code.split(" ")[0] + (f" ({signal.group(1)})" if signal else "")
    return f"workbench: rank {rank}'s process ended with exit code {code}"


@contextmanager
def torchrun_reports_in_one_line(local_master: bool) -> Iterator[None]:
    """While inside, this process's stdout and stderr turn torchrun's failure reports into one line each;
    on a `local_master` the ranks' start lines are dropped (their executor's copy reaches this terminal)."""
    saved = sys.stdout, sys.stderr
    streams = TorchrunReports(sys.stdout, local_master), TorchrunReports(sys.stderr, local_master)
    sys.stdout, sys.stderr = streams  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        for stream in streams:
            stream.close_report()


def say_started(rank: int, world_size: int) -> None:
    """A rank's first line: where it runs (on a cluster, which machine each Spark task landed on)."""
    where = socket.gethostname()
    print(f"workbench: rank {rank} of {world_size} runs on {where}", file=sys.stderr, flush=True)


def quiet_task_failure_logs(session: Any) -> None:
    """Turn off the Spark loggers that print a failed task's traceback with a Java stack under it (the
    driver's one-line summary says why the job failed); Spark's other warnings stay."""
    jvm = session.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.OFF
    for logger in TASK_FAILURE_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger, level)
