"""The tutorial path: every notebook in notebooks/ is collected by nbval (none silently skipped)."""

import subprocess
import sys

import nbformat

from tests.conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_nbval_collects_every_code_cell_of_every_notebook():
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--nbval-lax", "-p", "no:cacheprovider",
         "notebooks"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stdout + listed.stderr
    collected: dict[str, int] = {}
    for line in listed.stdout.splitlines():
        if ".ipynb::Cell" in line:
            name = line.split("::", 1)[0].rsplit("/", 1)[-1]
            collected[name] = collected.get(name, 0) + 1
    for path in NOTEBOOKS:
        code_cells = sum(c.cell_type == "code" for c in nbformat.read(path, as_version=4).cells)
        assert collected.get(path.name) == code_cells, (
            f"{path.name}: {collected.get(path.name)} of {code_cells}"
        )


def test_every_checked_cell_keeps_its_expected_output():
    for path in NOTEBOOKS:
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code" and "# NBVAL_CHECK_OUTPUT" in cell.source:
                assert cell.outputs, f"{path.name} cell {index} is checked but stores no output to compare"


def test_notebooks_store_no_widget_state_and_stay_small():
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        assert "widgets" not in notebook.metadata, f"{path.name} stores widget state (clear it before saving)"
        assert path.stat().st_size < 100_000, f"{path.name} is {path.stat().st_size:,} bytes"
