"""Packages that import their public names on first use: kernels, parallel, train, widgets."""

import importlib

import pytest


@pytest.mark.parametrize("package", ["workbench.parallel", "workbench.train", "workbench.widgets"])
def test_every_listed_name_imports(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None


@pytest.mark.parametrize(
    "package", ["workbench.kernels", "workbench.parallel", "workbench.train", "workbench.widgets"]
)
def test_dir_lists_the_names_and_unknown_names_are_refused(package):
    module = importlib.import_module(package)  # the kernels' names would import numba: not asked for here
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nothing_here'"):
        module.nothing_here  # noqa: B018
