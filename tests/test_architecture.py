"""The layer rules in pyproject.toml hold, and an upward import breaks them with the import named."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    """lint-imports over the `workbench` package found first under `root`, with the repo's contracts."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
        timeout=120,
    )


def _copy_with(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of the package where `module` (a path under workbench/) gains `line` at the top."""
    shutil.copytree(REPO / "workbench", tmp_path / "workbench", ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "workbench" / module
    target.write_text(line + "\n" + target.read_text())
    return tmp_path


def test_the_package_keeps_its_layers():
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 1 kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "named"),
    [
        (
            "train/loop.py",
            "from workbench.parallel import launch",
            "workbench.train.loop -> workbench.parallel",
        ),
        (
            "monitor/sampler.py",
            "import workbench.widgets.loss_plot",
            "workbench.monitor.sampler -> workbench.widgets.loss_plot",
        ),
        ("data/splits.py", "from workbench.train import config", "workbench.data.splits -> workbench.train"),
        ("kernels/reduce.py", "import workbench.train.loop", "workbench.kernels.reduce -> workbench.train"),
    ],
)
def test_an_upward_import_fails_naming_the_import(tmp_path, module, line, named):
    done = _lint(_copy_with(tmp_path, module, line))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "BROKEN" in done.stdout and named in done.stdout
