"""Open a run's own files (``metrics.jsonl``, ``config.json``, ``.lock``) for writing without following a
symbolic link planted in their place: a link could make training overwrite any file its user can write.

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
from pathlib import Path


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
