"""Run notebooks in JupyterLab in headless Chromium (Playwright) and check what a user would see.

JupyterLab serves a temporary copy of ``notebooks/`` (so autosave never touches the repository). The test
presses Run ▸ Run All Cells in every notebook (three at a time, each in its own tab: `NotebookRuns`),
waits for the last cell, then checks the page: no errors, every plotly plot holds data, plotly's widget
bundle arrived at most once, and where a notebook has a Dashboard, its loss plot holds as many points as
the notebook says and the progress bar reached 100%. The lab runs the notebooks as a learner does, with the
exercises' stubs: every check says "not attempted yet", every cell built on a stub waits, and no
``%%answer`` cell runs.

Then the exercises are done in the same page, as a learner does after Run All: with the answers on
(``WORKBENCH_ANSWERS=1`` in the kernel) each cell that waited, said "not attempted yet" or held an unrun
answer runs again, in order (a ``%%ranks`` one between the notebook's ``%ranks start`` and ``stop`` cells);
no error may follow, and every checked cell (``# NBVAL_CHECK_OUTPUT``) must show the output stored in the
repository (`checked_outputs`), and no cell may print on stderr where the stored notebook has nothing there
(a library's log lines under a tutorial's cell, which nbval's lax mode never compares). So each notebook
runs once in the suite, and nbval's comparison is made on this run (nbval itself runs the tour on the
installed wheel, tests/test_wheel.py).
Screenshots go to ``artifacts/browser/``.

The lab, the browser and Run All live in ``jupyterlab.py``.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
import time
from pathlib import Path

import pytest

from tests.browser.checked_outputs import differing_checked_cells
from tests.browser.jupyterlab import (
    ARTIFACTS,
    EMPTY_PLOTS_JS,
    REPO,
    NotebookRuns,
    errors_in_page,
    notebook_in_page,
    run_cells_again,
    wait_until_kernel_quiet,
)
from tests.browser.stored_figures import store_figures
from workbench.bench.nbval_stderr import stderr_text
from workbench.exercises.waiting import ANSWERS_ENV

NOTEBOOKS = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def notebook_runs(browser, lab, request):
    """The selected notebooks (``-k`` may pick some), run three at a time in order."""
    selected = [
        item.callspec.params["notebook"]
        for item in request.session.items
        if getattr(item, "module", None) is request.module and hasattr(item, "callspec")
    ]
    runs = NotebookRuns(browser, lab, selected, window=3)
    yield runs
    runs.close_all()


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_notebook_runs_in_the_browser_without_errors_and_with_filled_plots(notebook_runs, notebook):
    try:
        page, received = notebook_runs.finished(notebook, timeout_s=600)
        _check_page(page, received, notebook)
        _do_the_exercises(page, notebook_runs.lab, notebook)
        if os.environ.get("WORKBENCH_STORE_FIGURES"):  # make figures: the pictures GitHub and nbviewer show,
            store_figures(page, REPO / "notebooks" / notebook)  # the answers' plots among them
    finally:
        notebook_runs.close(notebook)


def _check_page(page, received: list[int], notebook: str) -> None:
    time.sleep(1.0)  # the last throttled widget messages
    page.screenshot(path=str(ARTIFACTS / f"{Path(notebook).stem}.png"), full_page=True)
    assert errors_in_page(page) == []
    assert page.get_by_text("Jupyter news").count() == 0, "JupyterLab's news pop-up is showing"
    plots = page.locator(".js-plotly-plot")
    empty = plots.evaluate_all(EMPTY_PLOTS_JS)
    assert plots.count() >= MIN_PLOTS.get(notebook, 1), f"only {plots.count()} plotly plots in the page"
    assert empty == [], f"{len(empty)} of {plots.count()} plotly plots hold no data: {empty}"
    # plotly's 5-MB widget bundle reaches the page once, not with each plot (workbench.widgets._figure_widget)
    large = [size for size in received if size > 4_000_000]
    assert len(large) <= 1, f"{len(large)} websocket messages over 4 MB: {large}"
    _check_exercises_wait(page, notebook)
    check = EXTRA_CHECKS.get(notebook)
    if check is not None:
        check(page)


def _check_exercises_wait(page, notebook: str) -> None:
    """Run All with the stubs: each %%answer cell says it was not run, each %%when_written cell waits, and
    the checks say "not attempted yet" (nothing failed: `errors_in_page` is empty)."""
    import nbformat

    cells = nbformat.read(REPO / "notebooks" / notebook, as_version=4).cells
    answers = sum(cell.source.startswith("%%answer") for cell in cells)
    stubbed = sum(  # "your turn" exercises: a stub cell, then the answer (an Exercises item has no stub)
        cell.source.startswith("%%answer") and before.cell_type == "code" and "%%answer" not in before.source
        for before, cell in itertools.pairwise(cells)
    )
    waits = sum(cell.source.startswith("%%when_written") for cell in cells)
    outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
    unrun = sum("One answer, not run" in text for text in outputs)
    waiting = sum(text.startswith("waiting for your ") for text in outputs)
    not_attempted = sum("not attempted yet: " in text for text in outputs)
    said = f"{unrun} of {answers} answers unrun, {waiting} of {waits} cells waiting"
    assert (unrun, waiting) == (answers, waits), said
    assert not_attempted + waiting >= stubbed, f"{not_attempted} 'not attempted yet' for {stubbed} exercises"


STUB_LINES = ("One answer, not run", "waiting for your ", "not attempted yet: ")


def _do_the_exercises(page, lab, notebook: str) -> None:
    """After Run All with the stubs: the answers on, each cell the stubs held back runs again, in order; no
    error follows, none is held back any more, and the checked cells show their stored outputs."""
    cells = notebook_in_page(page)["cells"]
    again = _held_back(cells)
    if again:
        run_cells_again(page, again, f"import os; os.environ[{ANSWERS_ENV!r}] = '1'")
        wait_until_kernel_quiet(lab, notebook, timeout_s=300)
        time.sleep(1.0)  # the last throttled widget messages
    page.screenshot(path=str(ARTIFACTS / f"{Path(notebook).stem}-answers.png"), full_page=True)
    assert errors_in_page(page) == [], "after the answers"
    ran = notebook_in_page(page)
    still = [i for i, cell in enumerate(ran["cells"]) if any(s in _output_text(cell) for s in STUB_LINES)]
    assert still == [], f"cells {still} still wait or hold an unrun answer after the answers ran"
    stored = json.loads((REPO / "notebooks" / notebook).read_text())
    assert differing_checked_cells(stored, ran) == []
    printed, expected = _stderr_of_cells(ran), _stderr_of_cells(stored)
    unexpected = {i: text[-300:] for i, text in printed.items() if i not in expected}
    assert unexpected == {}, "cells printed on stderr (a learner sees it) where the stored notebook does not"


def _stderr_of_cells(notebook: dict) -> dict[int, str]:
    """What each cell printed on stderr (warnings, a library's log lines), by position; where the stored
    notebook has some (a launch's progress line, Spark starting), the run may too."""
    texts = {index: stderr_text(cell.get("outputs", [])) for index, cell in enumerate(notebook["cells"])}
    return {index: text for index, text in texts.items() if text}


def _held_back(cells: list[dict]) -> list[int]:
    """Positions of the cells the stubs held back: each ``%%answer`` and ``%%when_written`` cell and each
    whose output says "not attempted yet"; with a ``%%ranks`` one among them after the ranks stopped, the
    ``%ranks start`` cell before it and the ``%ranks stop`` cell after it (the ranks must run again)."""

    def source(i: int) -> str:
        return "".join(cells[i]["source"])

    code = [i for i, cell in enumerate(cells) if cell["cell_type"] == "code"]
    held = [
        i
        for i in code
        if source(i).startswith(("%%answer", "%%when_written"))
        or any(line in _output_text(cells[i]) for line in STUB_LINES)
    ]
    on_ranks = [i for i in held if "%%ranks" in source(i)]
    if on_ranks:
        stops = [i for i in code if i > on_ranks[-1] and source(i).strip() == "%ranks stop"]
        starts = [i for i in code if i < on_ranks[0] and "%ranks start" in source(i)]
        if stops and starts:
            held = sorted({*held, starts[-1], stops[0]})
    return held


def _output_text(cell: dict) -> str:
    """The text of a cell's outputs (streams and ``text/plain``), as nbformat JSON holds them."""
    return "".join(
        "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
        for output in cell.get("outputs", [])
    )


def _check_optimizers(page) -> None:
    _assert_dashboard_shows_what_the_kernel_holds(page, "02_optimizers")
    outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
    line = next(t for t in outputs if "points of each run:" in t)
    expected = ast.literal_eval(line.split("points of each run:", 1)[1].strip().splitlines()[0])
    browser = page.locator(".workbench-runs")
    browser.scroll_into_view_if_needed()
    in_page = browser.locator(".js-plotly-plot").first.evaluate(
        "plot => Object.fromEntries(plot.data.filter(t => t.meta !== 'raw').map(t => [t.name, t.x.length]))"
    )
    assert in_page == expected, f"runs browser in the page {in_page} != the kernel's {expected}"
    table = browser.locator("table").first
    assert "lr=0.5" in table.inner_text()  # the runs table
    # the table fits: its columns spaced, one line per cell, inside the widget (scrolling, if ever wider)
    padding, wrapping = table.evaluate(
        "t => [parseFloat(getComputedStyle(t.querySelector('td')).paddingRight),"
        " Array.from(t.querySelectorAll('td'))"
        ".filter(d => getComputedStyle(d).whiteSpace !== 'nowrap').length]"
    )
    assert padding >= 10 and wrapping == 0, f"runs table: {padding}px between columns, {wrapping} cells wrap"
    holder = table.locator(
        "xpath=ancestor::*[contains(concat(' ', normalize-space(@class), ' '), ' widget-html ')][1]"
    )
    box, widget = holder.bounding_box(), browser.bounding_box()
    assert box["x"] + box["width"] <= widget["x"] + widget["width"] + 1, (box, widget)
    # a bare Trainer(...).fit() shows a bar that fills: the warm-up cell's two fits
    warmup = page.locator(".jp-CodeCell", has_text="warmup_losses = {}").locator(".jp-OutputArea")
    bars = warmup.locator(".progress-bar").evaluate_all("all => all.map(b => b.style.width)")
    labels = [text.replace("\u2007", " ") for text in warmup.locator(".widget-html").all_inner_texts()]
    assert bars == ["100%", "100%"], (bars, labels)
    assert sum("finished at step" in label for label in labels) == 2, labels
    # the lr range test's figure: drawn with every step's smoothed loss (a plain plotly Figure, no widget)
    lr_range = page.locator(".jp-CodeCell", has_text="lr_range_figure(lr_range)").locator(".js-plotly-plot")
    title, points = lr_range.first.evaluate("p => [p.layout.title.text, p.data[1].y.length]")
    assert title.startswith("lr range test") and points >= 50, (title, points)


def _check_data_parallel(page) -> None:
    in_page = _assert_dashboard_shows_what_the_kernel_holds(page, "03_data_parallel")
    assert {"digits-ddp rank 0", "digits-ddp rank 1"} <= in_page.keys()
    placement = page.locator(".workbench-dashboard").inner_text()
    assert "2 processes (gloo, CPU, 1 thread each)" in placement
    bars = _step_time_bars(page.locator(".workbench-dashboard"))
    assert bars == ["rank 0", "rank 1"], f"where the time goes: bars {bars}"
    # %%ranks cells under Run All: one block per rank (4 ranks × 4 cells with output), each rank's own output
    ranks = page.locator(".workbench-ranks")
    assert ranks.count() == 4, f"{ranks.count()} %%ranks outputs in the page"
    ring = ranks.nth(3).inner_text()  # the learner's stub: the check waits on every rank
    assert ring.count("not attempted yet: ring_all_reduce still calls your_turn()") == 4, ring
    blocks = ranks.first.locator("details").all_inner_texts()
    assert [b.split(" ·")[0] for b in blocks] == ["rank 0", "rank 1", "rank 2", "rank 3"], blocks
    sums = {line for block in blocks for line in block.splitlines() if line.startswith("all_reduce:")}
    assert len(sums) == 1, f"the ranks' all_reduce results differ in the page: {sums}"


def _step_time_bars(dashboard) -> list[str] | None:
    """The bars of the dashboard's "where the time goes" plot in the page (one per rank), None if absent."""
    return dashboard.locator(".js-plotly-plot").evaluate_all(
        "plots => plots.filter(p => ((p.layout.title || {}).text || '').startsWith('where the time goes'))"
        ".map(p => p.data[0].x ? Array.from(p.data[0].x) : []).pop() ?? null"
    )


def _check_sharded_data_parallel(page) -> None:
    """One finished dashboard (FSDP) with a memory plot and a bar per rank of where the time goes."""
    _check_dashboards(page, 1, pipeline=None)


def _check_model_parallel(page) -> None:
    """Two finished dashboards (pipeline, tensor), each with a memory plot and a bar per rank of where the
    time goes; the pipeline's timeline."""
    _check_dashboards(page, 2, pipeline=0)


def _check_dashboards(page, count: int, pipeline: int | None) -> None:
    dashboards = page.locator(".workbench-dashboard")
    assert dashboards.count() == count, f"{dashboards.count()} dashboards in the page"
    for index in range(count):
        dashboard = dashboards.nth(index)
        dashboard.scroll_into_view_if_needed()
        bar = dashboard.locator(".progress-bar").first.evaluate("bar => bar.style.width")
        assert bar == "100%", f"dashboard {index}: progress bar at {bar}"
        titles = dashboard.locator(".js-plotly-plot").evaluate_all(
            "plots => plots.map(plot => (plot.layout.title && plot.layout.title.text) || '')"
        )
        assert any("memory per rank" in t for t in titles), f"dashboard {index} has no memory plot: {titles}"
        bars = _step_time_bars(dashboard)
        assert bars == ["rank 0", "rank 1"], f"dashboard {index}: where the time goes: bars {bars}"
        if index == pipeline:
            assert any("bubble" in t and "measured" in t for t in titles), f"no pipeline timeline: {titles}"
            dashboard.screenshot(path=str(ARTIFACTS / "04b_model_parallel_dashboard.png"))


def _check_your_own_model(page) -> None:
    in_page = _assert_dashboard_shows_what_the_kernel_holds(page, "08_your_own_model")
    assert "shapes-cnn val f1" in in_page  # a custom metric reached the plot in the browser


def _check_hardware(page) -> None:
    tables = page.locator(".jp-OutputArea-output table").all_inner_texts()
    assert any("CPU matmul fp32" in t for t in tables), "the inspector shows no measurements"
    assert any("total per device" in t for t in tables), "the estimator shows no answer"
    _check_estimator_on_a_gpu(page)


def _check_estimator_on_a_gpu(page) -> None:
    """A learner picks an H100 in the Estimator: its memory row says the figure was checked on this CPU
    and what a GPU adds (cuDNN's and cuBLAS's workspaces); this CPU's own choice says nothing of it."""
    note = "a GPU's cuDNN and cuBLAS workspaces are not in it"
    answer = page.locator(".widget-html table", has_text="total per device")  # the Estimator's answer
    assert "1 × this CPU" in answer.inner_text()
    assert note not in answer.inner_text(), "the CPU's estimate speaks of a GPU's workspaces"
    page.locator(".widget-dropdown", has_text="hardware").locator("select").select_option(label="H100 SXM")
    answer.filter(has_text="× H100 SXM").wait_for(timeout=30_000)  # the kernel answered the choice
    row = answer.locator("tr", has_text="memory estimate").inner_text()
    assert note in row and "on this CPU" in row, row
    _check_largest_batch_button(page)


def _check_largest_batch_button(page) -> None:
    """The learner presses "largest batch that fits" (for the H100 just picked): the line beside the button
    names the batch, and the batch slider moved there."""
    page.get_by_role("button", name="largest batch that fits").click()
    said = page.locator(".widget-html", has_text=re.compile(r"^(batch [\d,]+ per device|not even a batch)"))
    said.wait_for(timeout=60_000)
    batch = re.search(r"batch ([\d,]+) per device", said.inner_text())
    assert batch is not None, said.inner_text()
    readout = page.locator(".widget-slider", has_text="batch / device").locator(".widget-readout")
    wanted = batch.group(1).replace(",", "")
    deadline = time.monotonic() + 30
    while readout.inner_text().replace(",", "") != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
    assert readout.inner_text().replace(",", "") == wanted, (readout.inner_text(), said.inner_text())


def _check_where_the_time_goes(page) -> None:
    text = "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())
    for line in ("same losses to 1e-5: True", "every rank reported: True", "compiled in "):
        assert line in text, f"{line!r} is not in the notebook's outputs"
    tables = page.locator(".jp-OutputArea-output table").count()
    assert tables >= 1, "the profiler's top operators are missing"


EXTRA_CHECKS = {
    "02_optimizers.ipynb": _check_optimizers,
    "03_data_parallel.ipynb": _check_data_parallel,
    "04a_sharded_data_parallel.ipynb": _check_sharded_data_parallel,
    "04b_model_parallel.ipynb": _check_model_parallel,
    "06_hardware_and_estimates.ipynb": _check_hardware,
    "08_your_own_model.ipynb": _check_your_own_model,
    "09_where_the_time_goes.ipynb": _check_where_the_time_goes,
}
# plots each notebook shows at least (02: four loss plots; 04a: the estimate, single-process memory, a
# dashboard's loss, devices and memory, ZeRO's bars, all runs, memory summary; 04b: single-process memory, two
# dashboards of loss, devices and memory, the pipeline's timeline, bubble, activations, a timeline, all runs,
# memory summary; 06: inspector, memory, roofline, estimator; 08: the files, the dashboard's loss and devices,
# the hand-written loop's loss plot and device monitor; 09: the two breakdowns)
MIN_PLOTS = {
    "02_optimizers.ipynb": 4,
    "03_data_parallel.ipynb": 3,
    "04a_sharded_data_parallel.ipynb": 10,
    "04b_model_parallel.ipynb": 17,
    "06_hardware_and_estimates.ipynb": 4,
    "08_your_own_model.ipynb": 5,
    "09_where_the_time_goes.ipynb": 2,
}


def _assert_dashboard_shows_what_the_kernel_holds(page, name: str) -> dict[str, int]:
    """The notebook prints its Dashboard plot's point counts; the page's plot must hold the same."""
    outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
    line = next(t for t in outputs if "points in the loss plot:" in t)
    expected = ast.literal_eval(line.split("points in the loss plot:", 1)[1].strip().splitlines()[0])
    dashboard = page.locator(".workbench-dashboard")
    assert dashboard.count() == 1, "the Dashboard widget is not in the page"
    page.set_viewport_size({"width": 1400, "height": 4000})  # the whole Dashboard, no toolbar over its top
    dashboard.scroll_into_view_if_needed()
    dashboard.screenshot(path=str(ARTIFACTS / f"{name}_dashboard.png"))
    in_page = dashboard.locator(".js-plotly-plot").first.evaluate(  # the curves, not their faint raw copies
        "plot => Object.fromEntries(plot.data.filter(t => t.meta !== 'raw').map(t => [t.meta, t.x.length]))"
    )
    assert in_page == expected, f"loss plot in the page {in_page} != the kernel's {expected}"
    assert expected and all(n > 0 for n in expected.values())
    tested = {name: n for name, n in in_page.items() if " test" in name}  # once, at the end: not per epoch
    assert tested and set(tested.values()) == {1}, tested

    bar = dashboard.locator(".progress-bar").first.evaluate("bar => bar.style.width")
    assert bar == "100%", f"progress bar at {bar}"
    return in_page
