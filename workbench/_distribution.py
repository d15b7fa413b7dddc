"""The name workbench is installed under, and the install commands error messages print.

The import name is ``workbench``; the distribution's is ``gpu-training-workbench`` (``workbench`` on the
public package index is an unrelated project).

    >>> pip_install("spark")
    "pip install 'gpu-training-workbench[spark]'"
"""

from __future__ import annotations

DISTRIBUTION = "gpu-training-workbench"


def pip_install(extra: str) -> str:
    """The command that installs an extra of workbench (it keeps the torch already installed)."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"
