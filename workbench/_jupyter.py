"""`running_kernel`: the Jupyter kernel this process runs in, for any layer (a progress bar, a widget)."""

from __future__ import annotations

import sys
from typing import Any


def running_kernel() -> Any:
    """The ipykernel kernel running this process's cells, or None (IPython not imported: no kernel, and
    nothing is imported to find out)."""
    ipython = sys.modules.get("IPython")
    return None if ipython is None else getattr(ipython.get_ipython(), "kernel", None)
