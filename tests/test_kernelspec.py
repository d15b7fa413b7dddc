import json
import sys
from pathlib import Path

import nbformat
import pytest

from tests.conftest import REPO
from workbench.kernelspec import KERNEL_NAME, SOURCE_DIR, install_kernelspec

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_the_checked_in_kernelspec_is_valid():
    spec = json.loads((SOURCE_DIR / "kernel.json").read_text())
    launcher = ["-m", "ipykernel_launcher", "-f", "{connection_file}"]
    assert spec["argv"][1:] == [*launcher, "--IPKernelApp.extensions=workbench.kernel_preload"]
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


def test_the_command_names_the_missing_kernel_json_not_the_target(tmp_path, monkeypatch, capsys):
    """An installation without its package data: the error says which file is missing (it used to blame the
    folder it was writing to)."""
    from workbench import cli, kernelspec

    monkeypatch.setattr(kernelspec, "SOURCE_DIR", tmp_path / "lost")
    assert cli.main(["kernel", "install", "--prefix", str(tmp_path / "env")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"workbench kernel install: error: no kernelspec at {tmp_path / 'lost' / 'kernel.json'}"
    )
    assert "reinstall it (gpu-training-workbench)" in err and "cannot write" not in err


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


def test_the_kernel_started_from_the_installed_spec_trains_with_the_padded_allocator(tmp_path):
    """What a notebook gets: `workbench doctor`'s allocator line, asked inside a kernel from the spec."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    path = install_kernelspec(prefix=str(tmp_path))
    assert json.loads((path / "kernel.json").read_text())["env"] == {"MALLOC_TOP_PAD_": "268435456"}
    specs = KernelSpecManager(kernel_dirs=[str(path.parent)])
    manager = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        lines = []
        reply = client.execute_interactive(
            "from workbench.devices.cpu import allocator; print(allocator())",
            timeout=60,
            output_hook=lambda msg: lines.append(msg["content"].get("text", "")),
        )
        assert reply["content"]["status"] == "ok"
        assert "glibc malloc, MALLOC_TOP_PAD_=256 MiB" in "".join(lines)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_install_turns_off_jupyterlabs_news_popup_and_keeps_other_overrides(tmp_path):
    settings = tmp_path / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    settings.parent.mkdir(parents=True)
    mine = {"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"}}
    settings.write_text(json.dumps(mine))
    install_kernelspec(prefix=str(tmp_path))
    overrides = json.loads(settings.read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"] == {
        "fetchNews": "false",
        "checkForUpdates": False,
    }
    assert overrides["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}


def test_this_environments_lab_has_the_overrides():
    """`make install` ran the install: the lab `make lab` and the browser test start reads them."""
    settings = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    if not (Path(sys.prefix) / "share" / "jupyter" / "kernels" / KERNEL_NAME).is_dir():
        pytest.skip("the workbench kernelspec is not installed in this environment (run make install)")
    assert (
        json.loads(settings.read_text())["@jupyterlab/apputils-extension:notification"]["fetchNews"]
        == "false"
    )
