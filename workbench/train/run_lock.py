"""One fit at a time per run directory: an exclusive lock on ``runs/<run>/.lock`` for the life of a fit.

Two trainers writing one run name would interleave ``metrics.jsonl`` and overwrite each other's checkpoint
(a run silently lost). The lock is an ``flock`` on a file holding the holder's PID, host and start time:
the kernel drops it when the holder exits or dies, so a lock left by a killed process is taken over by
the next fit (which says whose it was), and a live holder is named in the refusal.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from workbench.train.run_files import open_run_file

LOCK_FILE = ".lock"


class RunInUseError(RuntimeError):
    """Another live process is training this run."""


class RunLock:
    """The lock on one run directory (see the module docstring).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> first, second = RunLock(folder), RunLock(folder)
        >>> first.acquire()
        >>> second.acquire()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        workbench.train.run_lock.RunInUseError: run directory ... is in use: PID ... on ... since ...
        >>> first.release()
        >>> second.acquire(); second.release()
    """

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.took_over: str | None = None  # who held it last when that process had died
        self._descriptor: int | None = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._descriptor is not None

    def acquire(self) -> None:
        """Take the lock, or raise RunInUseError naming the live holder; sets `took_over` when the previous
        holder died without releasing it."""
        if self._descriptor is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = open_run_file(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(_read(descriptor))
            os.close(descriptor)
            raise RunInUseError(
                f"run directory {self.path.parent} is in use: {holder}; wait for that run to end or stop it, "
                "or train under another run name"
            ) from None
        previous = _read(descriptor)
        self.took_over = _describe(previous) if previous else None  # a holder that died: the OS let go
        os.ftruncate(descriptor, 0)
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        os.pwrite(descriptor, json.dumps(record).encode(), 0)
        self._descriptor = descriptor

    def release(self) -> None:
        """Give the lock up (the file stays, empty: an empty lock file means nobody held it last)."""
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is None:
            return
        try:
            os.ftruncate(descriptor, 0)
        finally:
            os.close(descriptor)  # closing drops the flock

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _read(descriptor: int) -> dict[str, str] | None:
    text = os.pread(descriptor, 4096, 0).decode(errors="replace").strip()
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return {"pid": "?", "host": "?", "since": "?"}
    return record if isinstance(record, dict) else {"pid": "?", "host": "?", "since": "?"}


def _describe(record: dict[str, str] | None) -> str:
    if record is None:
        return "a process that wrote nothing yet"
    pid, host, since = (record.get(key, "?") for key in ("pid", "host", "since"))
    return f"PID {pid} on {host} has trained it since {since}"


def lock_for_fit(run_dir: Path) -> RunLock:
    """`run_dir` held for one fit (rank 0 of a named run): a second fit on it is refused, naming the
    holder; a directory that cannot be written is named with the fix; a lock left by a process that is
    gone is taken over, saying so."""
    lock = RunLock(run_dir)
    try:
        lock.acquire()
    except OSError as error:  # no such directory, read-only, permission denied
        raise OSError(
            f"cannot write the run directory {run_dir} ({error.strerror or error}); choose runs_dir= on a "
            "writable disk, or train without run=",
        ) from None
    if lock.took_over:
        print(f"{run_dir}: took over the lock of a run that is gone ({lock.took_over})", file=sys.stderr)
    return lock
