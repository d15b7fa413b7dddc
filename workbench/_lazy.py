"""Packages whose public names are imported on first use (so importing the package stays cheap)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``: each name in `homes` is read from its module (the
    value) when first asked for.

    Example (in a package's ``__init__.py``)::

        _HOMES = {"Dashboard": "workbench.widgets.dashboard"}
        __all__ = sorted(_HOMES)
        __getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
    """

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(homes[name]), name)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return __getattr__, __dir__
