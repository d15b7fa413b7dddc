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

import time

import nbformat

from tests.browser.jupyterlab import (
    ARTIFACTS,
    EMPTY_PLOTS_JS,
    errors_in_page,
    run_cells_again,
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
traces = dashboard.loss_plot.figure.data  # every curve ("run split" in its meta), the faint raw ones too
print(sorted((t.name if t.meta == "raw" else t.meta, 0 if t.x is None else len(t.x)) for t in traces))
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
        points: Object.fromEntries((plot.data || []).map(
            trace => [trace.meta === "raw" ? trace.name : trace.meta, (trace.x || []).length])),
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


FEED = """\
from workbench.widgets import LossPlot

METRICS = ("accuracy", "f1", "top5_accuracy", "precision", "recall", "calibration_error")


def feed(ranks, runs=("mine-ddp-1795673927",)):
    plot = LossPlot(log_y=True)
    for run in runs:
        plot.on_fit_start({"run": run, "start_step": 0})
        for step in range(1, 61):
            for rank in range(ranks):
                rank_loss = {"rank_loss": 2 / step**0.5 + 0.05 * rank} if ranks > 1 else {}
                plot.on_step({"step": step, "loss": 2 / step**0.5, "rank": rank, **rank_loss})
            if step % 10 == 0:
                splits = ("val", "test") if step == 60 else ("val",)
                for split in splits:
                    metrics = {name: 1 - 1 / (step + i) for i, name in enumerate(METRICS)}
                    plot.on_eval({"step": step, "split": split, "loss": 1.5 / step**0.5, **metrics})
        plot.on_fit_end({"status": "finished"})
    return plot
"""
# Per plot in the page: its plot area's width, how many panels, the test split's points per curve, and every
# pair of texts a person reads (titles, panel titles, tick labels, the legend) whose boxes overlap.
LAYOUT_JS = """plot => {
    const boxes = [];
    const add = (what, element) => {
        const box = element.getBoundingClientRect();
        if (box.width > 0 && box.height > 0) boxes.push([what, box]);
    };
    plot.querySelectorAll('.gtitle, .g-xtitle, .g-ytitle').forEach(e => add('title ' + e.textContent, e));
    plot.querySelectorAll('.annotation-text').forEach(e => add('panel ' + e.textContent, e));
    plot.querySelectorAll('.xtick text, .ytick text').forEach(e => add('tick ' + e.textContent, e));
    plot.querySelectorAll('.legend .bg').forEach(e => add('legend', e));
    const overlap = (a, b) => (
        a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1);
    const overlaps = [];
    boxes.forEach(([a, boxA], i) => boxes.slice(i + 1).forEach(([b, boxB]) => {
        if (overlap(boxA, boxB)) overlaps.push(`${a} / ${b}`);
    }));
    const tested = plot.data.filter(t => / test/.test(t.meta || '')).map(t => t.x.length);
    return {
        width: plot._fullLayout._size.w,
        figure: plot._fullLayout.width,
        panels: plot.querySelectorAll('.cartesianlayer > .subplot').length,
        legend: Array.from(plot.querySelectorAll('.legend .traces')).map(e => e.textContent),
        tested,
        overlaps,
    };
}"""


def test_the_loss_plot_reads_at_a_glance_in_a_1000_px_column_with_1_2_and_8_ranks_and_6_metrics(lab, page):
    """The loss in its own panel with log y, a panel per metric in rows of three, the test split once, a
    legend naming only what differs (ranks behind one entry), and no text on another: in JupyterLab."""
    notebook = nbformat.v4.new_notebook()
    shown = ["feed(1)", "feed(2)", "feed(8)", 'feed(8, runs=("mine-ddp-1795673927", "mine-ddp-1795673999"))']
    notebook.cells = [nbformat.v4.new_code_cell(FEED)] + [nbformat.v4.new_code_cell(cell) for cell in shown]
    notebook.metadata["kernelspec"] = {"name": "workbench", "display_name": "Python (workbench)"}
    nbformat.write(notebook, lab.notebooks / "loss_layout.ipynb")
    page.set_viewport_size(
        {"width": 1430, "height": 2400}
    )  # beside the file browser: a ~1000-px output column
    start_run_all(page, lab.url, "loss_layout.ipynb")
    wait_for_run_all(page, lab, "loss_layout.ipynb", timeout_s=180)
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .cartesianlayer').length === 4")
    time.sleep(1.0)  # the last relayout
    page.screenshot(path=str(ARTIFACTS / "loss_layout.png"), full_page=True)
    assert errors_in_page(page) == []
    one, two, eight, runs = page.locator(".js-plotly-plot").evaluate_all(f"all => all.map({LAYOUT_JS})")
    assert 950 <= one["figure"] <= 1050, f"the plot is {one['figure']} px wide, not a 1000-px column's"
    for layout in (one, two, eight, runs):
        assert layout["panels"] == 1 + 6, layout  # the loss and one panel per metric
        assert layout["overlaps"] == [], layout["overlaps"]
        assert layout["tested"] and set(layout["tested"]) == {1}, layout["tested"]  # once, at the end
    assert one["legend"] == ["train", "val", "test"], one["legend"]
    assert two["legend"] == eight["legend"] == ["train", "val", "test", "each rank"], eight["legend"]
    assert eight["width"] >= 0.9 * one["width"] and two["width"] >= 0.9 * one["width"], (one, two, eight)
    assert runs["width"] >= 0.75 * one["width"], runs  # two runs: a legend column, each run's name above


MONITOR_SAMPLES = """\
from workbench.widgets import DeviceMonitor


def sample(t):
    cpu = {"percent": 50.0, "per_core": [], "ram_used": 1, "ram_total": 4}
    return {"time": 100.0 + t, "gpus": [], "cpu": cpu}
"""
DRAW_THEN_SHOW = [
    "import time\n\nimport ipywidgets\n\n"
    + MONITOR_SAMPLES
    + """\


early = DeviceMonitor()
for t in range(3):
    early.update(sample(t))
early.flush()  # drawn while the page still loads plotly's bundle
time.sleep(8)  # the bundle has loaded before anything shows the plot
""",
    """\
late = DeviceMonitor()  # the page binds its module 3 s after the model was made
for t in range(3):
    late.update(sample(t))
late.flush()
ipywidgets.VBox([early.widget, late.widget])  # a layout of one's own: the page has only the models' state
""",
    """\
for monitor in (early, late):
    monitor.update(sample(3))
    monitor.stop()
print(early.point_counts(), late.point_counts())
""",
]
# A page too busy to bind a plot's module within 2 s of its model's creation, made repeatable: every plot's
# module but the first is evaluated 3 s late (anywidget then used to drop every message to that model).
SLOW_MODULES_JS = """(() => {
    const create = URL.createObjectURL.bind(URL);
    let modules = 0;
    URL.createObjectURL = (object) => {
        if (!(object instanceof Blob) || object.type !== "text/javascript" || object.size > 1e6) {
            return create(object);
        }
        modules += 1;
        if (modules === 1) return create(object);
        globalThis.slowedModules = (globalThis.slowedModules || 0) + 1;
        const wait = "await new Promise(resolve => setTimeout(resolve, 3000));\\n";
        return create(new Blob([wait, object], { type: object.type }));
    };
})()"""


def test_plots_drawn_before_the_page_could_show_them_keep_every_point(lab, page):
    """Two ways a busy page lost a plot for good. (1) The edits that arrive while plotly's bundle loads must
    reach plotly's model, not only the views waiting then: a view opened later (or drawn again) starts from
    the model's state, and drew an empty plot whose later edits failed. (2) anywidget drops every message
    to a model whose module binds over 2 s after the model was made (a page busy evaluating the bundle)."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in DRAW_THEN_SHOW]
    notebook.metadata["kernelspec"] = {"name": "workbench", "display_name": "Python (workbench)"}
    nbformat.write(notebook, lab.notebooks / "draw_then_show.ipynb")
    page.add_init_script(SLOW_BUNDLE_JS)
    page.add_init_script(SLOW_MODULES_JS)
    uncaught = []
    page.on("pageerror", lambda error: uncaught.append(str(error)))
    start_run_all(page, lab.url, "draw_then_show.ipynb")
    wait_for_run_all(page, lab, "draw_then_show.ipynb", timeout_s=300)
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length === 2", timeout=60_000)
    time.sleep(1.0)  # the last edit's draw (a view draws edits at most every 300 ms)
    assert page.evaluate("[globalThis.slowedBundles, globalThis.slowedModules]") == [1, 1], "nothing slowed"
    drawn = page.locator(".js-plotly-plot").evaluate_all(
        "all => all.map(plot => Object.fromEntries((plot.data || []).map(t => [t.name, (t.x || []).length])))"
    )
    printed = page.locator(".jp-OutputArea-output").last.inner_text()
    assert errors_in_page(page) == [] and uncaught == []
    assert printed.strip() == "{'CPU': 4, 'RAM': 4} {'CPU': 4, 'RAM': 4}"
    assert drawn == [{"CPU": 4, "RAM": 4}] * 2, "the page lost what the kernel drew before showing the plots"


SHOW_A_MONITOR = (
    MONITOR_SAMPLES
    + """\


monitor = DeviceMonitor()
for t in range(3):
    monitor.update(sample(t))
monitor.flush()
monitor.widget
"""
)
# Two plots due to draw before the monitor's next edit, as the page's shared queue holds them: the first one's
# draw throws (as plotly.js does on an edit it cannot apply), the second counts its draws.
QUEUE_A_FAILING_DRAW_JS = """() => {
    const budget = globalThis[Symbol.for("workbench.plotly-draw-queue")];
    globalThis.drawsAfterTheFailure = 0;
    budget.queue.push(
        { flush: () => { throw new Error("a plot's draw failed"); } },
        { flush: () => { globalThis.drawsAfterTheFailure += 1; } },
    );
}"""
MONITOR_POINTS_JS = """() => Object.fromEntries(
    (document.querySelector('.js-plotly-plot').data || []).map(t => [t.name, (t.x || []).length]))"""


def test_a_draw_that_throws_does_not_stop_the_plots_queued_behind_it(lab, page):
    """The page's plots draw in turn from one queue; a draw that threw used to end the turn-taking: every
    plot queued behind it waited for another plot's next edit, and a plot alone on the page never drew
    again (its own edits saw it still queued)."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(SHOW_A_MONITOR)]
    notebook.metadata["kernelspec"] = {"name": "workbench", "display_name": "Python (workbench)"}
    nbformat.write(notebook, lab.notebooks / "failing_draw.ipynb")
    uncaught = []
    page.on("pageerror", lambda error: uncaught.append(str(error)))
    start_run_all(page, lab.url, "failing_draw.ipynb")
    wait_for_run_all(page, lab, "failing_draw.ipynb", timeout_s=180)
    page.wait_for_function(f"({MONITOR_POINTS_JS})().CPU === 3", timeout=60_000)
    page.evaluate(QUEUE_A_FAILING_DRAW_JS)
    run_cells_again(page, [], "monitor.update(sample(3)); monitor.flush()")  # the monitor's next edit
    try:
        page.wait_for_function(f"({MONITOR_POINTS_JS})().CPU === 4", timeout=10_000)
    finally:
        drawn = page.evaluate(f"[globalThis.drawsAfterTheFailure, ({MONITOR_POINTS_JS})()]")
        assert drawn == [1, {"CPU": 4, "RAM": 4}], "the plots queued behind the failing draw never drew"
    assert len(uncaught) == 1 and "a plot's draw failed" in uncaught[0], uncaught  # reported, not swallowed
