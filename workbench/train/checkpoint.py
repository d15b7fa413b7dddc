"""Checkpoints written atomically (temp file in the same directory, fsync, rename) and read with
``weights_only=True``, so a crash mid-write never leaves a torn file and loading never runs pickled code."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write `state` (tensors, numbers, strings, lists, dicts) to `path` atomically; returns the path.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt.pt"
        >>> _ = save_checkpoint({"step": 3, "w": torch.ones(2)}, path)
        >>> load_checkpoint(path)["step"]
        3
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint` (``weights_only=True``: data only, no code)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}; train with a run name first, or check the path")
    return torch.load(path, map_location=map_location, weights_only=True)
