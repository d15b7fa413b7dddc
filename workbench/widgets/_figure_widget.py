"""plotly's `FigureWidget`, with its front-end code sent to a page once per kernel instead of once per plot.

plotly's `FigureWidget` is an anywidget whose `_esm` trait holds plotly's whole widget bundle (~5 MB of
JavaScript, plotly.js inside). Every instance syncs that string to the page, and anywidget imports it as a
new module each time: on a 2-core machine ~1 s of browser CPU per plot, plus 5 MB through the kernel's and
the server's sockets (a page with three Dashboards: ~85 MB). Here the bundle travels once per kernel, as
the binary state of one hidden `PlotlyBundle` model, and each plot syncs a small loader naming that model.
The first plot in a page imports the bundle from it; every later plot reuses the module. No round trip to
the kernel is needed, so plots still draw while a cell keeps the kernel busy (Run All, a blocking fit).
A view draws again when the whole figure arrives after it drew (see `sync_figure_for_display`).
The edits a plot receives while the bundle loads (a Dashboard started before it is shown draws at once)
are kept in order and handed to plotly once it listens; plotly applies each edit as a delta, so one lost
edit would leave the page's plot empty for good.

    >>> figure = FigureWidget()
    >>> len(figure._esm) < 5000 < len(bundle_model().bundle)
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
  let drawing = null;  // the view whose render is registering listeners now
  return {
    async initialize(context) {
      const definition = await plotlyWidget(context.model);
      widget = typeof definition === "function" ? await definition() : definition;
      // plotly's model and views listen through this model: a view's listeners end with the view
      const model = new Proxy(context.model, {
        get(target, property) {
          if (property === "on") {
            return (event, callback, ...rest) => {
              const view = drawing;
              const listener = (...args) => (view && !view.active ? undefined : callback(...args));
              return target.on(event, listener, ...rest);
            };
          }
          const value = target[property];
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
      return widget.initialize ? widget.initialize({ ...context, model }) : undefined;
    },
    render(context) {
      let view = null;
      const draw = () => {
        if (view) view.stop();
        const token = { active: true };
        const el = document.createElement("div");
        context.el.replaceChildren(el);
        drawing = token;
        let cleanup;
        try {
          cleanup = widget.render({ ...context, el });
        } finally {
          drawing = null;
        }
        view = { stop: () => { token.active = false; if (typeof cleanup === "function") cleanup(); } };
      };
      draw();
      // plotly's view draws the state it finds, then follows edits. The whole figure sent when it is shown
      // (sync_figure_for_display: its layout, then its traces) can reach the model after this view drew
      // (ipywidgets applies updates asynchronously): then draw again from it, once for the pair, or every
      // later edit lands on a plot without its traces or title. Listen to both: equal traces send nothing.
      let pending = false;
      const redraw = () => {
        if (!pending) {
          pending = true;
          queueMicrotask(() => { pending = false; draw(); });
        }
      };
      const whole = ["change:_widget_layout", "change:_widget_data"];
      for (const event of whole) context.model.on(event, redraw);
      return () => {
        for (const event of whole) context.model.off(event, redraw);
        if (view) view.stop();
      };
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
