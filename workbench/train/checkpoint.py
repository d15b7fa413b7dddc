"""Checkpoints written atomically (temp file in the same directory, fsync, rename) and read with
``weights_only=True``, so a crash mid-write never leaves a torn file and loading never runs pickled code.

A save killed mid-write (``kill -9``, a power cut) leaves the previous checkpoint as it was and a temp file
named after the writer's PID; the next save removes the temp files of writers that are gone. A full disk
is said as such (torch reports it as "unexpected pos"), and a file that is not a readable checkpoint is
named with what is wrong, instead of torch's internal error.

Example (a run's checkpoint, then a file that is not one):
    >>> import tempfile, torch, torch.nn.functional as F
    >>> from pathlib import Path
    >>> from torch.utils.data import TensorDataset
    >>> from workbench.train import TrainConfig, Trainer
    >>> data, runs = TensorDataset(torch.randn(64, 3), torch.arange(64) % 2), tempfile.mkdtemp()
    >>> result = Trainer(torch.nn.Linear(3, 2), F.cross_entropy, data, TrainConfig(epochs=2, batch_size=16),
    ...                  run="demo", runs_dir=runs, progress=False).fit()
    >>> state = load_checkpoint(result.checkpoint)
    >>> state["step"], state["epoch"], sorted(state["model"])
    (8, 2, ['bias', 'weight'])
    >>> model = torch.nn.Linear(3, 2)
    >>> model.load_state_dict(state["model"])
    <All keys matched successfully>
    >>> Path(runs, "notes.pt").write_text("not a checkpoint")
    16
    >>> load_checkpoint(Path(runs, "notes.pt"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: .../notes.pt is not a readable checkpoint...
"""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any

import psutil
import torch

from workbench._one_line import error_in_one_line
from workbench.train.run_files import file_size_limit

_DISK_FULL_SIGNS = ("unexpected pos", "No space left", "file write failed")


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write `state` (tensors, numbers, strings, lists, dicts) to `path` atomically; returns the path.

    Raises:
        OSError: ``ENOSPC`` with "no space left on the device holding …" when the disk filled up; the
            previous checkpoint at `path` is kept.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt.pt"
        >>> _ = save_checkpoint({"step": 3, "w": torch.ones(2)}, path)
        >>> load_checkpoint(path)["step"]
        3
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(path)
    prefix = f".{path.name}.{os.getpid()}."
    descriptor, temporary = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        Path(temporary).unlink(missing_ok=True)
        if not _disk_full(error):  # torch says a write failed the same way for both causes below
            raise
        limit, free = file_size_limit(), shutil.disk_usage(path.parent).free
        if limit is not None and free > 2**20:  # room on the disk: the file-size limit stopped it
            raise OSError(
                errno.EFBIG,
                f"{path.name} outgrew this process's file-size limit (ulimit -f: {limit:,} bytes) while "
                f"being written in {path.parent}; the previous checkpoint is kept. Raise the limit (ulimit "
                "-f unlimited) and resume",
            ) from error
        raise OSError(
            errno.ENOSPC,
            f"no space left on the device holding {path.parent} ({free / 2**20:.1f} MiB free) while "
            f"writing {path.name}; the previous checkpoint is kept. Free some space, or train with "
            "runs_dir= on another disk",
        ) from error
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint` (``weights_only=True``: data only, no code).

    Raises:
        FileNotFoundError: nothing at `path` (or a directory).
        ValueError: `path` is not a readable checkpoint (truncated, corrupt, not a torch file, or not a dict),
            with what torch found.
    """
    path = Path(path)
    if not path.is_file():
        what = "a directory, not a checkpoint file" if path.is_dir() else "no checkpoint"
        raise FileNotFoundError(f"{what} at {path}; train with a run name first, or check the path")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        if "GLOBAL" not in str(error):  # "Unsupported operand", "truncated"...: damaged bytes, not code
            raise _unreadable(path, error) from None
        raise ValueError(
            f"{path} holds Python objects besides tensors, numbers and strings, so it is not a workbench "
            "checkpoint; it was not loaded, since loading would run its code (weights_only=True). Load it "
            "yourself with torch.load(..., weights_only=False) only if you trust where it came from"
        ) from None
    except Exception as error:  # torch's reader fails on damaged bytes in many ways (IndexError, KeyError…)
        raise _unreadable(path, error) from None
    if not isinstance(state, dict):
        raise ValueError(f"{path} holds a {type(state).__name__}, not a workbench checkpoint (a dict)")
    return state


def _unreadable(path: Path, error: BaseException) -> ValueError:
    return ValueError(
        f"{path} is not a readable checkpoint ({error_in_one_line(error)[:200]}); it is truncated, corrupt "
        "or not a torch file. A save cut short never replaces a good checkpoint, so this file was damaged or "
        "replaced afterwards; resume from another checkpoint or start over"
    )


def remove_stale_temp_files(path: str | os.PathLike) -> list[Path]:
    """Delete the temp files that saves to `path` left when their writer died (its PID is gone); a live
    writer's file is kept. Returns what was removed."""
    path = Path(path)
    removed = []
    for temporary in path.parent.glob(f".{path.name}.*.tmp"):
        parts = temporary.name[len(path.name) + 2 :].split(".")
        pid = int(parts[0]) if parts and parts[0].isdigit() else None
        if pid is not None and psutil.pid_exists(pid):
            continue  # its writer (this process or another) may be writing it now
        temporary.unlink(missing_ok=True)
        removed.append(temporary)
    return removed


def _disk_full(error: BaseException) -> bool:
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    return isinstance(error, RuntimeError | OSError) and any(sign in str(error) for sign in _DISK_FULL_SIGNS)
