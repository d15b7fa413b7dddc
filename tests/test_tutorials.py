"""`workbench tutorials`: copies that update untouched notebooks, keep edited ones, and say what to run."""

from __future__ import annotations

import json

import pytest

from workbench import cli, tutorials
from workbench.tutorials import MANIFEST, EditedTutorialsError, copy_tutorials, tutorials_source


def test_a_copy_updates_the_notebooks_nobody_edited(tmp_path):
    first = copy_tutorials(tmp_path)
    assert first.copied == sorted(p.name for p in tutorials_source().glob("*.ipynb"))
    # An older release's copy, recorded in the manifest as workbench wrote it: replaced without --force.
    tour = tmp_path / "00_tour.ipynb"
    tour.write_text("an older version")
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    manifest["00_tour.ipynb"] = tutorials._digest(tour)
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    again = copy_tutorials(tmp_path)
    assert again.copied == ["00_tour.ipynb"] and not again.replaced
    assert tour.read_bytes() == (tutorials_source() / "00_tour.ipynb").read_bytes()


def test_edited_notebooks_stop_the_whole_copy_unless_forced(tmp_path):
    copy_tutorials(tmp_path)
    (tmp_path / "01_gpu_kernels.ipynb").write_text("mine")
    (tmp_path / "05_mixed_precision.ipynb").write_text("mine too")
    (tmp_path / "00_tour.ipynb").unlink()
    with pytest.raises(
        EditedTutorialsError, match=r"01_gpu_kernels.ipynb, 05_mixed_precision.ipynb in .* differ"
    ):
        copy_tutorials(tmp_path)
    assert not (tmp_path / "00_tour.ipynb").exists()  # nothing copied
    forced = copy_tutorials(tmp_path, force=True)
    assert forced.replaced == ["01_gpu_kernels.ipynb", "05_mixed_precision.ipynb"]
    assert forced.copied == ["00_tour.ipynb"]


def test_a_notebook_already_there_but_never_copied_counts_as_edited(tmp_path):
    (tmp_path / "03_data_parallel.ipynb").write_text("{}")
    with pytest.raises(EditedTutorialsError, match=r"03_data_parallel.ipynb in .* differs from the copy"):
        copy_tutorials(tmp_path)


def test_a_file_for_a_folder_and_a_package_without_its_notebooks_are_refused(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match=r"folder=.* is a file; give a folder"):
        copy_tutorials(tmp_path / "file")
    monkeypatch.setattr(tutorials, "_PACKAGE", tmp_path / "site-packages" / "workbench")
    with pytest.raises(FileNotFoundError, match=r"no tutorial notebooks in .*resources/tutorials.*reinstall"):
        tutorials_source()
    assert cli.main(["tutorials", str(tmp_path / "out")]) == 2


def test_the_command_says_how_to_get_jupyterlab_and_the_kernel_when_missing(tmp_path, monkeypatch, capsys):
    from workbench.cli import tutorials as tutorials_command

    monkeypatch.setattr(tutorials_command.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(tutorials_command, "_jupyter_kernels", lambda: {"python3"})
    assert cli.main(["tutorials", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"11 tutorial notebooks copied into {tmp_path / 't'}")
    assert out[1:] == [
        f"open them:  jupyter lab {tmp_path / 't'}",
        "JupyterLab is not installed here: pip install 'gpu-training-workbench[lab]'",
        "the notebooks run on the 'workbench' kernel: workbench kernel install --user",
    ]


def test_an_unwritable_folder_is_one_line(tmp_path, capsys):
    assert cli.main(["tutorials", "/proc/nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("workbench tutorials: error: cannot write /proc/nope") and err.count("\n") == 1
