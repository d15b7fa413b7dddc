"""A pytest plugin: a notebook cell that nbval fails gets the text its run printed on stderr added to the
failure. nbval says only "Unexpected output fields from running code: {'stderr'}", which leaves a run on
another machine (`workbench gpu-check`'s notebooks step) to be repeated to learn what was printed.

    pytest --nbval-lax -p workbench.bench.nbval_stderr notebooks/06_hardware_and_estimates.ipynb

This repository's conftest.py loads it for every pytest run there.
"""

from __future__ import annotations

from typing import Any

import pytest

from workbench.bench.failure_lines import STDERR_HEADING


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    outputs = getattr(item, "test_outputs", None)  # nbval's cell: the outputs its run sent
    if report.failed and call.when == "call" and outputs and isinstance(report.longrepr, str):
        stderr = "".join(_text(out.get("text", "")) for out in outputs if out.get("name") == "stderr")
        if stderr.strip():
            report.longrepr += f"\n{STDERR_HEADING}\n{stderr.strip()[-2000:]}\n"
    return report


def _text(text: str | list[str]) -> str:
    return text if isinstance(text, str) else "".join(text)
