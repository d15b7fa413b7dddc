"""A pytest plugin: nbval's notebook cells see stderr as a learner's kernel does, and say what they printed.

- nbval starts a notebook's kernel while pytest runs, and ipykernel then leaves what C code and child
  processes write to the kernel's stderr (kineto's log lines, a library's C++ warnings, a subprocess)
  out of the cell: it recognises pytest by ``PYTEST_CURRENT_TEST``. The kernel starts without it here.
- A cell that nbval fails gets the text its run printed on stderr added to the failure; nbval says only
  "Unexpected output fields from running code: {'stderr'}", which leaves a run on another machine
  (`workbench gpu-check`'s notebooks step) to be repeated to learn what was printed.

    pytest --nbval-lax -p workbench.bench.nbval_stderr notebooks/06_hardware_and_estimates.ipynb

This repository's conftest.py loads it for every pytest run there.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from workbench.bench.failure_lines import STDERR_HEADING

PYTEST_VARIABLE = "PYTEST_CURRENT_TEST"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each notebook (nbval's file item, whose setup starts its kernel) starts it without pytest's
    variable."""
    notebooks = {id(item.parent): item.parent for item in items if hasattr(item, "test_outputs")}
    for notebook in notebooks.values():
        notebook.setup = _without_pytest_variable(notebook.setup)


def _without_pytest_variable(setup: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        saved = os.environ.pop(PYTEST_VARIABLE, None)
        try:
            setup()
        finally:
            if saved is not None:
                os.environ[PYTEST_VARIABLE] = saved

    return run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    outputs = getattr(item, "test_outputs", None)  # nbval's cell: the outputs its run sent
    if report.failed and call.when == "call" and outputs and isinstance(report.longrepr, str):
        stderr = stderr_text(outputs)
        if stderr.strip():
            report.longrepr += f"\n{STDERR_HEADING}\n{stderr.strip()[-2000:]}\n"
    return report


def stderr_text(outputs: list[dict[str, Any]]) -> str:
    """What a cell's outputs (nbformat's, as a kernel sent them or a notebook file holds them) printed on
    stderr; a stream's text is a string or a list of lines.

    Example:
        >>> stderr_text([{"name": "stdout", "text": "a"}, {"name": "stderr", "text": ["b\\n", "c"]}])
        'b\\nc'
    """
    return "".join("".join(out.get("text", "")) for out in outputs if out.get("name") == "stderr")
