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
    assert "Contracts: 2 kept, 0 broken." in done.stdout


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
        (  # inside parallel: strategies never start processes
            "parallel/strategies/distributed.py",
            "from workbench.parallel.launching import launcher",
            "workbench.parallel.strategies.distributed -> workbench.parallel.launching",
        ),
        ("kernels/reduce.py", "import workbench.train.loop", "workbench.kernels.reduce -> workbench.train"),
        (  # an import for type hints only counts too (exclude_type_checking_imports = false)
            "kernels/clip.py",
            "import typing\nif typing.TYPE_CHECKING:\n    from workbench.train.config import TrainConfig",
            "workbench.kernels.clip -> workbench.train.config",
        ),
    ],
)
def test_an_upward_import_fails_naming_the_import(tmp_path, module, line, named):
    done = _lint(_copy_with(tmp_path, module, line))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "BROKEN" in done.stdout and named in " ".join(done.stdout.split())  # the report wraps lines


def _cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """The import cycles: strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in edges[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in edges:
        if module not in index:
            visit(module)
    return cycles


def test_no_two_modules_import_each_other_even_through_others():
    import grimp

    graph = grimp.build_graph("workbench", exclude_type_checking_imports=False)
    edges = {
        module: sorted(graph.find_modules_directly_imported_by(module)) for module in sorted(graph.modules)
    }
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [
        ["a", "b", "c"]
    ]  # the check can fail
    assert _cycles(edges) == []


def test_no_module_is_over_450_lines():
    sizes = {path: len(path.read_text().splitlines()) for path in (REPO / "workbench").rglob("*.py")}
    assert len(sizes) > 100 and max(sizes.values()) > 300  # the check sees the package
    assert {str(path.relative_to(REPO)): n for path, n in sizes.items() if n > 450} == {}


def test_the_trainer_class_is_readable_in_one_sitting():
    import ast

    source = (REPO / "workbench" / "train" / "loop.py").read_text()
    [trainer] = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Trainer"]
    assert trainer.end_lineno - trainer.lineno + 1 <= 300  # docstrings included
