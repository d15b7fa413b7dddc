"""The offline bundle's resolver against a fake folder of wheels: complete, or the missing wheel named."""

from __future__ import annotations

import re
import sys
import zipfile

import pytest

from workbench.bench import gpu_wheels


def _wheel(folder, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A minimal pure-Python wheel pip can resolve and install."""
    stem = f"{name.replace('-', '_')}-{version}"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    files = {
        f"{stem}.dist-info/METADATA": metadata,
        f"{stem}.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{stem}.dist-info/RECORD": "",
    }
    with zipfile.ZipFile(folder / f"{stem}-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)


def test_the_bundle_is_every_core_dependency_but_torch_and_what_the_check_and_the_build_need():
    names = [re.split(r"[<>=!~ ;\[]", requirement)[0] for requirement in gpu_wheels.requirements()]
    assert "torch" not in names
    assert {"numba", "numba-cuda", "plotly", "ipykernel", "pytest", "hatchling", "editables"} <= set(names)
    assert "jupyterlab" not in names  # the `lab` extra: not for the library or its check


@pytest.fixture
def fake_bundle(tmp_path, monkeypatch):
    _wheel(tmp_path, "alpha-lib", "1.0", ("beta-lib>=2",))
    _wheel(tmp_path, "beta-lib", "2.1")
    monkeypatch.setattr(gpu_wheels, "requirements", lambda: ["alpha-lib==1.0", "gamma-lib>=3"])
    return tmp_path


def test_a_complete_folder_resolves_without_an_index(fake_bundle, monkeypatch, capsys):
    monkeypatch.setattr(gpu_wheels, "requirements", lambda: ["alpha-lib==1.0"])
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert gpu_wheels.main([str(fake_bundle), "--check", "--python-version", version]) == 0
    assert "2 wheels" in capsys.readouterr().out


def test_a_missing_wheel_is_named(fake_bundle, capsys):
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert gpu_wheels.main([str(fake_bundle), "--check", "--python-version", version]) == 1
    assert capsys.readouterr().err.strip() == (
        f"gpu_wheels: the bundle in {fake_bundle} is incomplete: no wheel for gamma-lib>=3"
    )
