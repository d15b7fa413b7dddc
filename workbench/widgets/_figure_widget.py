"""plotly's `FigureWidget`, with its front-end code sent to a page once per kernel instead of once per plot.

plotly's `FigureWidget` is an anywidget whose `_esm` trait holds plotly's whole widget bundle (~5 MB of
JavaScript, plotly.js inside). Every instance syncs that string to the page, and anywidget imports it as a
new module each time: on a 2-core machine ~1 s of browser CPU per plot, plus 5 MB through the kernel's and
the server's sockets (a page with three Dashboards: ~85 MB). Here the bundle travels once per kernel, as
the binary state of one hidden `PlotlyBundle` model, and each plot syncs a small loader naming that model.
The first plot in a page imports the bundle from it; every later plot reuses the module. No round trip to
the kernel is needed, so plots still draw while a cell keeps the kernel busy (Run All, a blocking fit).

    >>> figure = FigureWidget()
    >>> len(figure._esm) < 3000 < len(bundle_model().bundle)
    True
    >>> figure._bundle_model == bundle_model().model_id
    True
"""

from __future__ import annotations

from pathlib import Path

import ipywidgets
import plotly
import plotly.graph_objects as go
import traitlets

BUNDLE = Path(plotly.__file__).parent / "package_data" / "widgetbundle.js"
# One module per plotly version and bundle: two kernels with different plotly in one page do not mix.
_KEY = f"workbench.plotly-widget-bundle/{plotly.__version__}/{BUNDLE.stat().st_size}"
_LOADER = """
const KEY = Symbol.for("__KEY__");

function plotlyWidget(model) {
  let loading = globalThis[KEY];
  if (!loading) {
    loading = (async () => {
      const carrier = await model.widget_manager.get_model(model.get("_bundle_model"));
      const url = URL.createObjectURL(new Blob([carrier.get("bundle")], { type: "text/javascript" }));
      try {
        return (await import(/* webpackIgnore: true */ url)).default;
      } finally {
        URL.revokeObjectURL(url);
      }
    })();
    globalThis[KEY] = loading;
    loading.catch(() => {
      if (globalThis[KEY] === loading) delete globalThis[KEY];  // the next plot tries again
    });
  }
  return loading;
}

export default async () => {
  let widget;  // plotly's definition for this model: its factory keeps the model's state in a closure
  return {
    async initialize(context) {
      const definition = await plotlyWidget(context.model);
      widget = typeof definition === "function" ? await definition() : definition;
      return widget.initialize ? widget.initialize(context) : undefined;
    },
    render(context) {
      return widget.render(context);
    },
  };
};
""".replace("__KEY__", _KEY)


class PlotlyBundle(ipywidgets.Widget):
    """A model with no view: plotly's widget bundle, synced to the page once as a binary buffer."""

    bundle = traitlets.Bytes().tag(sync=True)


class _OneBundle:
    """This kernel's `PlotlyBundle`, made on first use and again if it was closed."""

    def __init__(self) -> None:
        self._model: PlotlyBundle | None = None

    def __call__(self) -> PlotlyBundle:
        if self._model is None or self._model.comm is None:
            self._model = PlotlyBundle(bundle=BUNDLE.read_bytes())
        return self._model


bundle_model = _OneBundle()


class FigureWidget(go.FigureWidget):
    """`plotly.graph_objects.FigureWidget` whose 5-MB front-end bundle reaches each page once."""

    _esm = _LOADER
    _bundle_model = traitlets.Unicode().tag(sync=True)

    @traitlets.default("_bundle_model")
    def _this_kernels_bundle(self) -> str:  # in the state the widget opens with, before any plot draws
        return bundle_model().model_id
