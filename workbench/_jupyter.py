"""The Jupyter kernel or IPython shell this process runs cells in, for any layer (a progress bar, a widget,
a job running in the background)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def running_kernel() -> Any:
    """The ipykernel kernel running this process's cells, or None (IPython not imported: no kernel, and
    nothing is imported to find out)."""
    shell = _running_shell()
    return None if shell is None else getattr(shell, "kernel", None)


def after_each_cell(callback: Callable[[], bool]) -> bool:
    """Have the IPython shell that runs this process's cells call `callback` after each cell, on the thread
    that ran the cell, until it returns False; False (nothing to call it) where no shell runs cells.

    Example:
        >>> after_each_cell(lambda: False)  # a script: no shell
        False
    """
    shell = _running_shell()
    if shell is None:
        return False

    def after_cell(result: object = None) -> None:  # IPython's post_run_cell passes the cell's result
        if not callback():
            shell.events.unregister("post_run_cell", after_cell)

    shell.events.register("post_run_cell", after_cell)
    return True


def _running_shell() -> Any:
    ipython = sys.modules.get("IPython")
    return None if ipython is None else ipython.get_ipython()
