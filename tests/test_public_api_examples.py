"""Public API comes with a runnable example (the guide: "docstrings with runnable examples on public API").

Every class and function a package's `__all__` offers has a doctest (`>>>`) in its own docstring, or its
module's docstring uses it in one; `make test` runs them (`--doctest-modules`). The names below had none
when this check came (2026-12-07); the list may only shrink: a name given an example must leave it.
"""

from __future__ import annotations

import importlib
import inspect
import re
import types

import pytest

PACKAGES = ("data", "devices", "estimate", "exercises", "kernels", "monitor", "parallel", "train", "widgets")
WITHOUT_EXAMPLE_YET = frozenset(
    [
        "parallel.run_on_spark",
    ]
)


def _has_example(name: str, obj: object) -> bool:
    if ">>>" in (inspect.getdoc(obj) or ""):
        return True
    module = inspect.getmodule(obj)
    lines = (module.__doc__ or "").splitlines() if module is not None else []
    return any(re.search(rf"\b{name}\b", line) for line in lines if line.strip().startswith((">>>", "...")))


def _public_callables() -> dict[str, object]:
    found = {}
    for package in PACKAGES:
        module = importlib.import_module(f"workbench.{package}")
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, types.GenericAlias):  # a type alias (train.Event) is no API to call
                continue
            if inspect.isclass(obj) or callable(obj):  # constants (DATASETS, OPTIMIZERS) need none
                found[f"{package}.{name}"] = obj
    return found


def test_every_public_class_and_function_has_a_runnable_example():
    public = _public_callables()
    assert len(public) > 150 and "train.Trainer" in public  # the check sees the API
    missing = {name for name, obj in public.items() if not _has_example(name.split(".")[1], obj)}
    assert missing - WITHOUT_EXAMPLE_YET == set(), "public names without a >>> example"
    assert WITHOUT_EXAMPLE_YET - missing == set(), "these have an example now: take them off the list"
    assert public.keys() >= WITHOUT_EXAMPLE_YET


@pytest.mark.parametrize("name", ["train.Callback", "train.NonFiniteLossError", "data.split_loaders"])
def test_the_check_sees_an_example_where_there_is_one(name):
    package, attribute = name.split(".")
    assert _has_example(attribute, getattr(importlib.import_module(f"workbench.{package}"), attribute))
