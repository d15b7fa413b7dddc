"""plotly's `FigureWidget`, with its front-end code sent to a page once per kernel instead of once per plot.

plotly's `FigureWidget` is an anywidget whose `_esm` trait holds plotly's whole widget bundle (~5 MB of
JavaScript, plotly.js inside). Every instance syncs that string to the page, and anywidget imports it as a
new module each time: on a 2-core machine ~1 s of browser CPU per plot, plus 5 MB through the kernel's and
the server's sockets (a page with three Dashboards: ~85 MB). Here the bundle travels once per kernel, as
the binary state of one hidden `PlotlyBundle` model, and each plot syncs a small loader naming that model.
The first plot in a page imports the bundle from it; every later plot reuses the module. No round trip to
the kernel is needed, so plots still draw while a cell keeps the kernel busy (Run All, a blocking fit).
A view draws again when the whole figure arrives after it drew (see `sync_figure_for_display`), and fits the
width of the notebook's column (plotly's view drew every plot 700 px wide).
anywidget (0.11) drops every message to a model whose module has not bound 2 s after the model was made,
and the bundle can take longer to load (a busy 2-core machine): so `initialize` returns at once, the edits
a plot receives while the bundle loads (a Dashboard started before it is shown draws at once) are kept in
order and given to plotly's model once it listens (it applies edits to its state only from then), before
any view draws from that state; plotly applies each edit as a delta, so one lost edit would leave the plot
empty for good (replayed only to the views waiting then, a view opened later or drawn again drew an empty
plot). A page busy for over 2 s (the bundle evaluating on a loaded machine) still lost plots made just
before: the loader gives anywidget's models 60 s instead, and waits until the plots made with the first
have bound before it imports the bundle.
A view merges the restyles, relayouts and updates that come while it waits to draw and draws them as
one update, at most every 100 ms and every 4× its last draw's cost, but at least every 300 ms: a page slower
than the kernel's redraws (a Dashboard on 2 busy cores) otherwise fell further behind with every edit, and
the answer to every click waited behind that backlog (30 s after 100 s of training). The 300 ms bound keeps
the plot within about a second of the status line when draws get slow (8× with no bound: up to 1.9 s).
The page's plots share one budget: after a draw of t ms no plot draws for t/2 ms, so the kernel's messages
get at least a third of the page (six plots of a 2-process Launch, each drawing every 300 ms, left it 27 s
behind), and the plots due to draw take turns in one queue (each on its own timer, the same plots kept
drawing first and the loss plot waited seconds).

    >>> figure = FigureWidget()
    >>> len(figure._esm) < 16000 < len(bundle_model().bundle)
    True
    >>> figure._bundle_model == bundle_model().model_id
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ipywidgets
import plotly
import plotly.graph_objects as go
import traitlets

BUNDLE = Path(plotly.__file__).parent / "package_data" / "widgetbundle.js"
# One module per plotly version and bundle: two kernels with different plotly in one page do not mix.
_KEY = f"workbench.plotly-widget-bundle/{plotly.__version__}/{BUNDLE.stat().st_size}"
_LOADER = """
const KEY = Symbol.for("__KEY__");
// Each plot imports this module anew: what plots share lives on globalThis under these keys
const PATIENT = Symbol.for("workbench.anywidget-patience");
const BOUND = Symbol.for("workbench.plotly-widget-bound");  // when a plot last bound this module
const QUIET_MS = 200;

// anywidget (0.11) gives each model 2 s from its creation to bind its module (`AbortSignal.timeout(2000)` in
// its runtime), then drops every message to that model for good: a page busy for longer (plotly's bundle
// evaluating on a loaded 2-core machine, three notebooks at once) kept a plot empty. Its models get 60 s
if (!AbortSignal[PATIENT]) {
  const timeout = AbortSignal.timeout.bind(AbortSignal);
  const anywidgets = (stack) => /anywidget/.test(stack || "");
  AbortSignal.timeout = (ms) => timeout(ms === 2000 && anywidgets(new Error().stack) ? 60000 : ms);
  AbortSignal[PATIENT] = true;
}

function plotlyWidget(model) {
  let loading = globalThis[KEY];
  if (!loading) {
    loading = (async () => {
      // the plots made before this module patched the timeout bind first: evaluating the bundle blocks the
      // page (seconds on a slow machine), so wait until no plot bound for QUIET_MS (2 s at most)
      const started = performance.now();
      while (performance.now() - (globalThis[BOUND] || 0) < QUIET_MS && performance.now() - started < 2000) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
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

// What plotly's model follows: its edits (each a message, then null), and the whole figure (its state)
const EDITS = ["addTraces", "deleteTraces", "moveTraces", "restyle", "relayout", "update", "animate",
  "removeLayoutProps", "removeTraceProps"].map((edit) => `_py2js_${edit}`);
const WHOLE = ["_widget_layout", "_widget_data"];
// The edits a view merges and draws together, at most every MIN_DRAW_INTERVAL_MS and every 4× its last
// draw's cost, yet at least every MAX_DRAW_INTERVAL_MS (so a plot stays ~1 s behind the status line at most):
// a page that drew each edit as it came fell ever further behind a kernel that sends faster (a busy 2-core
// machine: the page 30 s behind after 100 s, every click's answer queued behind it)
const MIN_DRAW_INTERVAL_MS = 100;
const MAX_DRAW_INTERVAL_MS = 300;
const COALESCED = ["restyle", "relayout", "update"].map((edit) => `change:_py2js_${edit}`);
// The page's plots share one budget: after a draw that took t ms, no plot draws for t/2 ms, so the kernel's
// messages (a click's answer, the status line) get at least a third of the page: six plots of a 2-process
// Launch, each drawing every 300 ms, left the page up to 27 s behind on 2 cores; with t/4 (a fifth) the
// page still fell 12-26 s behind over two minutes on a slower 2-core machine (2.3-3.5 s with t/2)
const SHARE_GAP = 0.5;
// The plots due to draw wait in one queue and draw in turn, first come first drawn, when the budget allows:
// with a timer each, the plots that asked first kept asking first, and a Launch's loss plot went 5 s without
// a draw while the others drew
const SHARED = Symbol.for("workbench.plotly-draw-queue");
const budget = (globalThis[SHARED] ||= { next: 0, queue: [], timer: null });
const drawNext = () => {
  if (budget.timer !== null || budget.queue.length === 0) return;
  budget.timer = setTimeout(() => {
    budget.timer = null;
    try {
      budget.queue.shift().flush();
    } finally {  // a draw that throws (plotly.js on an edit it cannot apply) still lets the next one draw
      drawNext();
    }
  }, Math.max(0, budget.next - performance.now()));
};
let replaying = null;  // the edit plotly's model or view reads now (see the model's proxy)
let modelReads = false;  // plotly's model applies an edit now (see the model's proxy)

// An edit as plotly's model should apply it: Python's "_undefined_" ("leave this trace's value as it is", an
// entry of a style's per-trace list) read as undefined, as plotly's deserializer gives its views; its model
// reads edits raw and stored the string (`"line": "_undefined_"`): a view drawn later from it failed
function withoutUndefined(edit) {
  if (!edit || typeof edit !== "object") return edit;
  const clean = (style) => Object.fromEntries(Object.entries(style).map(([key, value]) => [
    key, Array.isArray(value) ? value.map((one) => (one === "_undefined_" ? undefined : one)) : value]));
  const styles = ["style_data", "restyle_data"].filter((name) => edit[name]);
  return Object.assign({ ...edit }, ...styles.map((name) => ({ [name]: clean(edit[name]) })));
}

function follow(view, name, value) {
  replaying = { name, value };
  try {
    for (const callback of view.followers[`change:${name}`] || []) callback();
  } finally {
    replaying = null;
  }
}

// A view's listeners (`followers`, by event) and its pending style (by trace) and layout edits: the
// restyles, relayouts and updates that came since it last drew, merged in order, drawn as one update (or
// relayout); any other edit draws them first. Edits from the view itself (a zoom) draw as they come.
function coalescingView() {
  const view = { active: true, followers: {}, pending: null, scheduled: false, next: 0 };
  const schedule = () => {
    view.scheduled = true;
    setTimeout(() => {
      if (!view.scheduled || budget.queue.includes(view)) return;
      budget.queue.push(view);
      drawNext();
    }, Math.max(0, view.next - performance.now()));
  };
  view.flush = () => {
    view.scheduled = false;
    if (!view.pending || !view.active) return;
    const pending = view.pending;
    view.pending = null;
    const started = performance.now();
    try {
      draw(pending);
    } finally {  // the next draw waits 4× this one's cost (≤ 1/5 of the page's time), 300 ms at most
      const done = performance.now();
      view.next = done + Math.min(MAX_DRAW_INTERVAL_MS, Math.max(MIN_DRAW_INTERVAL_MS, 4 * (done - started)));
      budget.next = Math.max(budget.next, done + SHARE_GAP * (done - started));
    }
  };
  const draw = (pending) => {
    const ids = { trace_edit_id: pending.traceEdit, layout_edit_id: pending.layoutEdit };
    ids.source_view_id = null;
    if (pending.styles.size === 0) {
      follow(view, "_py2js_relayout", { relayout_data: pending.layout, ...ids });
      return;
    }
    const groups = new Map();  // the traces whose pending edits set the same keys: one update each
    for (const [trace, values] of pending.styles) {
      const keys = Object.keys(values).sort().join(" ");
      groups.set(keys, [...(groups.get(keys) || []), trace]);
    }
    let layout = pending.layout;
    for (const [keys, traces] of groups) {
      const style = {};
      for (const key of keys.split(" ")) style[key] = traces.map((trace) => pending.styles.get(trace)[key]);
      follow(view, "_py2js_update", { style_data: style, layout_data: layout, style_traces: traces, ...ids });
      layout = {};
    }
  };
  view.coalesce = (name, edit) => {
    if (!view.active || edit === null || edit === undefined) return;
    const update = name === "_py2js_update";
    const traces = update ? edit.style_traces : name === "_py2js_restyle" ? edit.restyle_traces : [];
    if (edit.source_view_id || !Array.isArray(traces)) {
      view.flush();
      follow(view, name, edit);
      return;
    }
    const pending = (view.pending ||= { styles: new Map(), layout: {} });
    const style = (update ? edit.style_data : name === "_py2js_restyle" ? edit.restyle_data : null) || {};
    for (const [key, value] of Object.entries(style)) {
      traces.forEach((trace, i) => {
        const one = Array.isArray(value) ? value[i % value.length] : value;
        if (one === undefined || one === "_undefined_") return;
        const values = pending.styles.get(trace) || {};
        delete values[key];  // a later edit of a key goes after the ones made since ("line", "line.color")
        values[key] = one;
        pending.styles.set(trace, values);
      });
    }
    const layout = (update ? edit.layout_data : name === "_py2js_relayout" ? edit.relayout_data : null) || {};
    for (const [key, value] of Object.entries(layout)) {
      delete pending.layout[key];
      pending.layout[key] = value;
    }
    if (edit.trace_edit_id !== undefined) pending.traceEdit = edit.trace_edit_id;
    if (edit.layout_edit_id !== undefined) pending.layoutEdit = edit.layout_edit_id;
    if (!view.scheduled) schedule();
  };
  return view;
}

export default async () => {
  let widget;  // plotly's definition for this model: its factory keeps the model's state in a closure
  let drawing = null;  // the view whose render is registering listeners now
  let ready;  // settles once plotly's model follows this model
  const queued = [];  // the edits since the latest whole figure, while the bundle loads
  const modelView = { followers: {} };  // plotly's model's own listeners: it keeps the state views draw
  return {
    initialize(context) {
      // plotly's bundle can take seconds to load, and anywidget waits for this to return before it passes
      // on any message: return at once, keep the edits that come meanwhile and give them to plotly's model
      // once it listens (it applies edits to the state every view draws from)
      const target = context.model;
      globalThis[BOUND] = performance.now();
      const keepers = [
        ...EDITS.map((name) => [`change:${name}`, () => queued.push({ name, value: target.get(name) })]),
        ...WHOLE.map((name) => [`change:${name}`, () => queued.splice(0)]),
      ];
      for (const [event, keeper] of keepers) target.on(event, keeper);
      // plotly's model and views listen through this model: a view's listeners end with the view
      const model = new Proxy(target, {
        get(object, property) {
          if (property === "on") {
            return (event, callback, ...rest) => {
              const view = drawing;
              const read = view ? callback : (...args) => {
                modelReads = true;
                try {
                  return callback(...args);
                } finally {
                  modelReads = false;
                }
              };
              ((view || modelView).followers[event] ||= []).push(read);
              const guarded = (...args) => (view && !view.active ? undefined : read(...args));
              let listener = guarded;
              if (view && COALESCED.includes(event)) {
                const name = event.slice("change:".length);
                listener = () => view.coalesce(name, object.get(name));
              } else if (view && event.startsWith("change:_py2js_")) {
                listener = (...args) => { view.flush(); guarded(...args); };  // after the pending
              }
              return object.on(event, listener, ...rest);
            };
          }
          if (property === "get" && (replaying || modelReads)) {
            const edit = replaying;
            const clean = modelReads;
            return (name) => {
              const value = edit && name === edit.name ? edit.value : object.get(name);
              return clean && name.startsWith("_py2js_") ? withoutUndefined(value) : value;
            };
          }
          const value = object[property];
          return typeof value === "function" ? value.bind(object) : value;
        },
      });
      const release = () => {
        for (const [event, keeper] of keepers) target.off(event, keeper);
      };
      ready = (async () => {
        const definition = await plotlyWidget(target);
        widget = typeof definition === "function" ? await definition() : definition;
        if (widget.initialize) widget.initialize({ ...context, model });
        // plotly's model listens from now on: it gets the kept edits, in order, before any view draws, so
        // a view drawn now or later (another view, a redraw on the whole figure) starts from all of them
        release();
        for (const edit of queued.splice(0)) follow(modelView, edit.name, edit.value);
      })();
      ready.catch((error) => {
        release();
        queued.splice(0);
        console.error("workbench: plotly's widget bundle did not load", error);
      });
    },
    async render(context) {
      await ready;
      let view = null;
      const draw = () => {
        if (view) view.stop();
        const token = coalescingView();
        const el = document.createElement("div");
        context.el.replaceChildren(el);
        drawing = token;
        let cleanup;
        try {
          cleanup = widget.render({ ...context, el });
        } finally {
          drawing = null;
        }
        // plotly's view draws at the width of a div not yet in the page: 700 px, whatever the notebook's
        // column. Resize with its container (the figure is `responsive`, so plotly.js has a handler for it)
        let width = 0;
        const fit = () => {
          const now = Math.round(el.getBoundingClientRect().width);
          if (!token.active || now === 0 || now === width) return;
          if (!el._responsiveChartHandler) {  // plotly.js has not drawn yet: look again soon
            setTimeout(fit, 100);
            return;
          }
          width = now;
          el._responsiveChartHandler();
        };
        const resized = new ResizeObserver(fit);
        resized.observe(el);
        view = {
          stop: () => {
            token.active = false;
            resized.disconnect();
            if (typeof cleanup === "function") cleanup();
          },
        };
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
      const whole = WHOLE.map((name) => `change:${name}`);
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._config = {**self._config, "responsive": True}  # plotly.js resizes it with its container

    @traitlets.default("_bundle_model")
    def _this_kernels_bundle(self) -> str:  # in the state the widget opens with, before any plot draws
        return bundle_model().model_id
