"""How the workbench widgets display: the ipywidget view, with a stable plain-text fallback."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets


def widget_bundle(widget: widgets.Widget, text: str, **kwargs: Any) -> dict[str, Any]:
    """`widget`'s mime bundle with ``text/plain`` replaced by `text` (what nbval and consoles show)."""
    bundle = widget._repr_mimebundle_(**kwargs)
    bundle["text/plain"] = text
    return bundle
