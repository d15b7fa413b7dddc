"""A Dashboard that draws before the page has shown it keeps every point and its title, in a real browser.

The bugs this guards against: plotly's view draws the figure state it finds, then follows the kernel's
edits as deltas, so one lost edit leaves a plot empty for good. A Dashboard started before it is shown
(``dashboard.start(); dashboard``, notebook 08) draws into its plots at once, while the page still loads
plotly's multi-MB widget bundle. (1) anywidget 0.11 drops every message of a model whose `initialize` has
not finished 2 s after the model was made; our loader's `initialize` used to wait for the bundle, which on a
loaded 2-core CI machine took longer: every plot of the Dashboard stayed empty and untitled. (2) The edits
that arrive while the bundle loads must reach the view that draws once it has loaded (plotly's model
follows edits only once it listens). (3) The whole figure sent when the Dashboard is shown can reach the
model after a view drew.
The fix is in `workbench.widgets._figure_widget`. Here the page makes the bundle finish loading 4 s late (an
init script; no CPU luck involved): the loader before the fix failed this test every time (1 and 2), and
with the replay of queued edits removed it fails too (plots titled but empty).
"""

from __future__ import annotations

import nbformat

from tests.browser.jupyterlab import (
    ARTIFACTS,
    EMPTY_PLOTS_JS,
    errors_in_page,
    start_run_all,
    wait_for_run_all,
)

START_THEN_SHOW = """\
from workbench.presets import build_experiment
from workbench.train import Trainer
from workbench.widgets import Dashboard

digits = build_experiment("digits-mlp", epochs=20)
dashboard = Dashboard(Trainer(digits.model, digits.loss_fn, digits.splits, digits.config), monitor=False)
dashboard.start()  # training draws into the plots from now on, before the page has shown them
dashboard
"""
WAIT = """\
result = await dashboard.wait_async()
traces = dashboard.loss_plot.figure.data  # every curve, the faint raw ones too
print(sorted((trace.name, 0 if trace.x is None else len(trace.x)) for trace in traces))
"""
# A busy machine, made repeatable: plotly's widget bundle (the one multi-MB JavaScript module the page
# imports from a blob) finishes loading 4 s late, as it did on a loaded 2-core CI machine.
SLOW_BUNDLE_JS = """(() => {
    const create = URL.createObjectURL.bind(URL);
    URL.createObjectURL = (object) => {
        if (!(object instanceof Blob) || object.type !== "text/javascript" || object.size < 1e6) {
            return create(object);
        }
        globalThis.slowedBundles = (globalThis.slowedBundles || 0) + 1;
        const wait = "await new Promise(resolve => setTimeout(resolve, 4000));\\n";
        return create(new Blob([wait, object], { type: object.type }));
    };
})()"""
# The Dashboard's loss plot (its first plotly plot), as plotly drew it: title and points per trace.
LOSS_PLOT_JS = """() => {
    const plot = document.querySelector('.workbench-dashboard .js-plotly-plot');
    return {
        title: (plot.layout.title && plot.layout.title.text) || "",
        points: Object.fromEntries((plot.data || []).map(trace => [trace.name, (trace.x || []).length])),
    };
}"""


def test_a_dashboard_drawing_while_the_page_loads_plotly_shows_every_point(lab, page):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(START_THEN_SHOW), nbformat.v4.new_code_cell(WAIT)]
    notebook.metadata["kernelspec"] = {"name": "workbench", "display_name": "Python (workbench)"}
    nbformat.write(notebook, lab.notebooks / "start_then_show.ipynb")
    page.add_init_script(SLOW_BUNDLE_JS)
    uncaught = []  # plotly.js failing on an edit for a trace its plot lacks throws in the page
    page.on("pageerror", lambda error: uncaught.append(str(error)))
    start_run_all(page, lab.url, "start_then_show.ipynb")
    wait_for_run_all(page, lab, "start_then_show.ipynb", timeout_s=300)
    # the kernel may be done before the page has drawn the view (its bundle loads 4 s late; on a loaded
    # machine later still): wait for the loss plot to be on the page, as a person would look for it
    page.wait_for_selector(".workbench-dashboard .js-plotly-plot", timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / "start_then_show.png"), full_page=True)
    assert page.evaluate("globalThis.slowedBundles") == 1, "the bundle was not slowed: the test tests nothing"
    assert errors_in_page(page) == [] and uncaught == []
    assert page.locator(".js-plotly-plot").evaluate_all(EMPTY_PLOTS_JS) == []
    drawn = page.evaluate(LOSS_PLOT_JS)
    printed = page.locator(".jp-OutputArea-output").last.inner_text()
    assert drawn["title"] == "Loss"
    assert str(sorted(drawn["points"].items())) == printed.strip(), "the page lost points the kernel drew"
