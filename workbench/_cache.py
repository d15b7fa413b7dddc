"""The user's cache folder for what workbench keeps between processes (compiled kernels, kernel reports).

Example:
    >>> cache_folder("kernels").parts[-2:]
    ('workbench', 'kernels')
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_folder(name: str) -> Path:
    """``$XDG_CACHE_HOME/workbench/<name>`` (``~/.cache/workbench/<name>`` without it); not created here."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "workbench" / name
