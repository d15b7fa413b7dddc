"""How the workbench widgets display: the ipywidget view, with a stable plain-text fallback."""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go


def widget_bundle(widget: widgets.Widget, text: str, **kwargs: Any) -> dict[str, Any]:
    """`widget`'s mime bundle with ``text/plain`` replaced by `text` (what nbval and consoles show)."""
    bundle = widget._repr_mimebundle_(**kwargs)
    bundle["text/plain"] = text
    return bundle


def sync_figure_for_display(figure: go.FigureWidget) -> None:
    """Put `figure`'s current traces and layout into the state a new browser view starts from.

    plotly's FigureWidget does this in its own ``_repr_mimebundle_``, which never runs when the figure is
    shown inside a container (our views are VBoxes): then a view opened after the figure changed started
    from the traces it had when built (none), and plotly.js failed on the next edit ("Cannot use 'in'
    operator to search for 'line' in undefined"), leaving an empty plot. Call it under the figure's lock.
    """
    figure._widget_layout = deepcopy(figure._layout_obj._props)
    figure._widget_data = deepcopy(figure._data)
