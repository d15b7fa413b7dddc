import json
import sys

import nbformat
import pytest

from tests.conftest import REPO
from workbench.kernelspec import KERNEL_NAME, SOURCE_DIR, install_kernelspec

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_the_checked_in_kernelspec_is_valid():
    spec = json.loads((SOURCE_DIR / "kernel.json").read_text())
    assert spec["argv"][1:] == ["-m", "ipykernel_launcher", "-f", "{connection_file}"]
    assert spec["language"] == "python"
    assert {"logo-32x32.png", "logo-64x64.png"} <= {p.name for p in SOURCE_DIR.iterdir()}


def test_install_points_the_kernel_at_this_interpreter(tmp_path):
    path = install_kernelspec(prefix=str(tmp_path))
    assert path == tmp_path / "share" / "jupyter" / "kernels" / KERNEL_NAME
    spec = json.loads((path / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    assert (path / "logo-64x64.png").read_bytes() == (SOURCE_DIR / "logo-64x64.png").read_bytes()


def test_install_refuses_a_directory_without_kernel_json(tmp_path):
    with pytest.raises(FileNotFoundError, match="no kernelspec at"):
        install_kernelspec(prefix=str(tmp_path), source=tmp_path)


def test_install_refuses_user_and_prefix_together(tmp_path):
    with pytest.raises(ValueError, match="either user=True or prefix"):
        install_kernelspec(user=True, prefix=str(tmp_path))


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_stores_the_workbench_kernelspec(path):
    spec = json.loads((SOURCE_DIR / "kernel.json").read_text())
    kernelspec = nbformat.read(path, as_version=4).metadata.get("kernelspec", {})
    assert kernelspec.get("name") == KERNEL_NAME, f"{path.name} would open a 'Select Kernel' dialog"
    assert kernelspec.get("display_name") == spec["display_name"]
