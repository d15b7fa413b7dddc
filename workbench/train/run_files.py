"""Open a run's own files (``metrics.jsonl``, ``config.json``, ``.lock``) for writing without following a
symbolic link planted in their place: a link could make training overwrite any file its user can write;
and say why a write failed (`explain_write_failure`). Imports no torch: `workbench runs` reads runs fast.

Example:
    >>> import os, tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> with os.fdopen(open_run_file(folder / "log", os.O_WRONLY | os.O_CREAT), "w") as file:
    ...     _ = file.write("ok")
    >>> os.symlink(folder / "log", folder / "link")
    >>> open_run_file(folder / "link", os.O_WRONLY)
    Traceback (most recent call last):
    ...
    OSError: [Errno 40] refusing to write .../link: it is a symbolic link (to .../log), which ...
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

CONFIG_FILE = "config.json"  # the run's settings, rewritten when a control changes one
CHECKPOINT_FILE = "checkpoint.pt"  # the last checkpoint (`workbench runs` looks for it without torch)


def open_run_file(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW)``; OSError (ELOOP) naming the link and its target for a link."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as error:
        if error.errno != errno.ELOOP or not path.is_symlink():
            raise
        raise OSError(
            errno.ELOOP,
            f"refusing to write {path}: it is a symbolic link (to {os.readlink(path)}), which would make "
            "training write wherever it points; remove the link, or train under another run name",
        ) from None


def file_size_limit() -> int | None:
    """This process's largest file size in bytes (``ulimit -f``), or None when there is no limit."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def explain_write_failure(path: Path, error: OSError) -> str:
    """Why writing `path` failed, in words that name the limit and the fix."""
    limit = file_size_limit()
    if error.errno == errno.EFBIG and limit is not None:
        why = f"it reached this process's file-size limit (ulimit -f: {limit:,} bytes); raise the limit"
    elif error.errno == errno.ENOSPC:
        free = shutil.disk_usage(path.parent).free
        why = f"no space left on the device ({free / 2**20:.1f} MiB free); free some space"
    elif error.errno == errno.EDQUOT:
        why = "the disk quota is used up; free some of it"
    else:
        why = f"{error.strerror or error}; check the folder"
    return f"cannot write {path}: {why}, then resume the run (fit(resume=True), or --resume)"
