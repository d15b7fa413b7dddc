"""The `workbench` kernel imports what the tutorials need while it waits for the first cell.

A fresh kernel spends most of a tutorial's first seconds importing (2 cores: torch ~2 s, TorchDynamo ~2 s,
which torch's optimizers import on first use, plotly's renderers ~2.4 s, which import nbformat and with it
jsonschema's IRI grammar). The kernelspec loads this module as an IPython extension; it imports
`PRELOADED`, one module per turn of the kernel's event loop, on the kernel's own thread (no concurrent
imports), starting `DELAY_S` after the kernel starts, and stops for good as soon as a cell starts: from then
on a cell imports what it needs, as without it. A cell sent at once (nbval, a Run All the moment the kernel
is idle) finds nothing imported ahead and waits for nothing; a cell sent during an import waits for that
import (torch: ~2 s on 2 cores). A newcomer who reads the notebook's first lines before Run All finds
those imports done.

Set ``WORKBENCH_PRELOAD=0`` in the kernel's environment to import nothing ahead (the environment before
Jupyter started: a cell that sets it is too late). ``numba`` and CUDA are never imported ahead: a cell may
still choose the simulator (`NUMBA_ENABLE_CUDASIM`) or the visible devices.

    >>> from workbench.kernel_preload import PRELOADED
    >>> PRELOADED[0]
    'torch'
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

# In the order the tour meets them: torch, the trainer and TorchDynamo (torch's optimizers import it on first
# use) for its first cell that trains, the widgets (plotly's FigureWidget imports plotly's renderers) for its
# Dashboard, plotly.express for its first figure.
PRELOADED = (
    "torch",
    "workbench.train",
    "workbench.presets",
    "torch._dynamo",
    "workbench.widgets",
    "plotly.express",
    "plotly.io._renderers",
)
SWITCH = "WORKBENCH_PRELOAD"
DELAY_S = 1.0  # a cell sent as the kernel starts (nbval, Run All at once) comes first
_LOG = logging.getLogger(__name__)


class Preloader:
    """Imports `modules` one per call of `schedule`'d turns until all are imported or a cell starts."""

    def __init__(
        self,
        modules: Iterable[str],
        schedule: Callable[[Callable[[], None]], Any],
        log: logging.Logger = _LOG,
    ) -> None:
        self._pending = list(modules)
        self._schedule = schedule
        self._log = log
        self.imported: list[str] = []

    def start(self) -> None:
        """Import the next module in a later turn (and the rest after it, a turn each)."""
        if self._pending:
            self._schedule(self._import_next)

    def cell_started(self, *_: Any) -> None:
        """IPython's ``pre_run_cell``: nothing more is imported ahead."""
        self._pending.clear()

    def _import_next(self) -> None:
        if not self._pending:
            return
        name = self._pending.pop(0)
        try:
            importlib.import_module(name)
        except Exception as error:  # the cell that imports it shows the error; the kernel's log says why here
            self._log.warning("workbench: not imported ahead: %s (%s: %s)", name, type(error).__name__, error)
            self._pending.clear()
            return
        self.imported.append(name)
        self.start()


def load_ipython_extension(ipython: Any) -> None:
    """IPython calls it as the kernel starts (the kernelspec names it in ``--IPKernelApp.extensions``)."""
    if os.environ.get(SWITCH, "1") == "0" or getattr(ipython, "kernel", None) is None:
        return
    from tornado.ioloop import IOLoop

    loop = IOLoop.current()
    # the kernel's log goes to Jupyter's terminal (a warning on the cells' stderr would reach no cell)
    preloader = Preloader(PRELOADED, lambda step: loop.call_later(0.01, step), log=ipython.kernel.log)
    ipython.events.register("pre_run_cell", preloader.cell_started)
    loop.call_later(DELAY_S, preloader.start)
