"""Run notebooks in JupyterLab in headless Chromium (Playwright) and check what a user would see.

JupyterLab serves a temporary copy of ``notebooks/`` (so autosave never touches the repository). The test
presses Run ▸ Run All Cells in every notebook, waits for the last cell, then checks the page: no errors,
every plotly plot holds data, and where a notebook has a Dashboard, its loss plot holds as many points as the
notebook says and the progress bar reached 100%.
Screenshots go to ``artifacts/browser/``.

Needs Debian's chromium (``CHROMIUM``, default ``/usr/bin/chromium``). Under ``make test`` (which installs it)
a missing browser fails the test; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "browser"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "workbench-browser-test"
# The plotly plots in the page with no trace holding values (x, y, z, pie values, or an image source), as
# "cell [n]: title [trace names]"; numpy arrays arrive base64-encoded as {bdata, dtype}.
EMPTY_PLOTS_JS = """plots => plots.filter(plot => {
    const has = v => v && (v.length || (v.bdata && v.bdata.length));
    const filled = t => has(t.x) || has(t.y) || has(t.z) || has(t.values) || has(t.source);
    return !plot.data || !plot.data.some(filled);
}).map(plot => {
    const title = (plot.layout && plot.layout.title && plot.layout.title.text) || "(untitled)";
    const cell = plot.closest(".jp-CodeCell");
    const prompt = cell ? cell.querySelector(".jp-InputArea-prompt").textContent.trim() : "?";
    return `cell ${prompt} ${title} [${(plot.data || []).map(trace => trace.name).join(", ")}]`;
})"""


def _chromium() -> str:
    path = os.environ.get("WORKBENCH_CHROMIUM") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        if os.environ.get("WORKBENCH_CHROMIUM"):
            pytest.fail(f"{path} is missing; `make test` installs it with apt-get install chromium")
        pytest.skip(f"no browser at {path} (run under `make test`, or apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory, free_port):
    """A JupyterLab server on a copy of notebooks/; yields its base URL."""
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(REPO / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("runs", ".ipynb_*"))
    # Render every cell (JupyterLab 4 virtualises long notebooks), in a settings folder of our own.
    settings = root / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    port = free_port()
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser",
        f"--ServerApp.root_dir={root / 'notebooks'}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        f"--IdentityProvider.token={TOKEN}", "--ServerApp.allow_root=True",
        f"--LabApp.workspaces_dir={root / 'workspaces'}",  # never restore a user's open tabs
        f"--LabApp.user_settings_dir={root / 'settings'}",
    ]  # fmt: skip
    env = {**os.environ, "JUPYTER_PREFER_ENV_PATH": "1"}
    log = (root / "lab.log").open("w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(root / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


@pytest.fixture
def page():
    """A fresh headless Chromium page (1400×1600); the browser closes after the test."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), args=CHROMIUM_FLAGS)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1600})
        finally:
            browser.close()


def _run_all_cells(page, url: str, notebook: str, timeout_s: float) -> None:
    page.goto(f"{url}/lab/tree/{notebook}?reset&token={TOKEN}")  # reset: only this notebook open
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    # Run only once the kernel is connected; earlier, JupyterLab asks "Select Kernel" instead of running.
    page.wait_for_selector("text=Python (workbench) | Idle", timeout=90_000)
    assert page.locator(".jp-Dialog").count() == 0, "a dialog opened (kernel selection?)"
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    # Done when the code cells are numbered [1], [2], … [n] in order (a fresh kernel ran each once; stored
    # numbers of checked outputs do not look like that) and the kernel is idle again.
    cells = json.loads((REPO / "notebooks" / notebook).read_text())["cells"]
    try:
        _wait_until_all_ran(page, sum(c["cell_type"] == "code" for c in cells), timeout_s)
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{notebook}-unfinished.png"), full_page=True)
        prompts = page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
        raise AssertionError(f"{notebook} did not finish running; prompts: {prompts}") from None


def _wait_until_all_ran(page, code_cells: int, timeout_s: float) -> None:
    page.wait_for_function(
        """(codeCells) => {
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
            const busy = document.querySelector(".jp-Notebook-ExecutionIndicator[data-status='busy']");
            const numbered = prompts.every((p, i) => p.textContent.trim() === `[${i + 1}]:`);
            return prompts.length === codeCells && !busy && numbered;
        }""",
        arg=code_cells,
        timeout=timeout_s * 1000,
    )


def _errors_in_page(page) -> list[str]:
    stderr = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
    texts = page.locator(stderr).all_inner_texts()
    return [t for t in texts if re.search(r"Traceback|Error\b", t)]


NOTEBOOKS = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_notebook_runs_in_the_browser_without_errors_and_with_filled_plots(lab, page, notebook):
    _run_all_cells(page, lab, notebook, timeout_s=600)
    time.sleep(1.0)  # the last throttled widget messages
    page.screenshot(path=str(ARTIFACTS / f"{Path(notebook).stem}.png"), full_page=True)
    assert _errors_in_page(page) == []
    plots = page.locator(".js-plotly-plot")
    empty = plots.evaluate_all(EMPTY_PLOTS_JS)
    assert plots.count() >= MIN_PLOTS.get(notebook, 1), f"only {plots.count()} plotly plots in the page"
    assert empty == [], f"{len(empty)} of {plots.count()} plotly plots hold no data: {empty}"
    check = EXTRA_CHECKS.get(notebook)
    if check is not None:
        check(page)


def _check_optimizers(page) -> None:
    _assert_dashboard_shows_what_the_kernel_holds(page, "02_optimizers")


def _check_data_parallel(page) -> None:
    in_page = _assert_dashboard_shows_what_the_kernel_holds(page, "03_data_parallel")
    assert {"digits-ddp rank 0", "digits-ddp rank 1"} <= in_page.keys()
    placement = page.locator(".workbench-dashboard").inner_text()
    assert "2 processes (gloo, CPU, 1 thread each)" in placement


def _check_model_parallel(page) -> None:
    """Three finished dashboards (FSDP, pipeline, tensor), each with a memory plot; the pipeline timeline."""
    dashboards = page.locator(".workbench-dashboard")
    assert dashboards.count() == 3, f"{dashboards.count()} dashboards in the page"
    for index in range(3):
        dashboard = dashboards.nth(index)
        dashboard.scroll_into_view_if_needed()
        bar = dashboard.locator(".progress-bar").first.evaluate("bar => bar.style.width")
        assert bar == "100%", f"dashboard {index}: progress bar at {bar}"
        titles = dashboard.locator(".js-plotly-plot").evaluate_all(
            "plots => plots.map(plot => (plot.layout.title && plot.layout.title.text) || '')"
        )
        assert any("memory per rank" in t for t in titles), f"dashboard {index} has no memory plot: {titles}"
        if index == 1:
            assert any("bubble" in t and "measured" in t for t in titles), f"no pipeline timeline: {titles}"
            dashboard.screenshot(path=str(ARTIFACTS / "04_model_parallel_dashboard.png"))


def _check_your_own_model(page) -> None:
    in_page = _assert_dashboard_shows_what_the_kernel_holds(page, "08_your_own_model")
    assert "shapes-cnn val f1" in in_page  # a custom metric reached the plot in the browser


def _check_hardware(page) -> None:
    tables = page.locator(".jp-OutputArea-output table").all_inner_texts()
    assert any("CPU matmul fp32" in t for t in tables), "the inspector shows no measurements"
    assert any("total per device" in t for t in tables), "the estimator shows no answer"


EXTRA_CHECKS = {
    "02_optimizers.ipynb": _check_optimizers,
    "03_data_parallel.ipynb": _check_data_parallel,
    "04_model_parallel.ipynb": _check_model_parallel,
    "06_hardware_and_estimates.ipynb": _check_hardware,
    "08_your_own_model.ipynb": _check_your_own_model,
}
# plots each notebook shows at least (02: four loss plots; 04: three dashboards of loss, devices and memory,
# the pipeline's timeline, estimate, single-process memory, bubble, activations, a timeline, all runs, memory
# summary; 06: inspector, memory, roofline, estimator; 08: the files, the dashboard's loss and devices, the
# hand-written loop's loss plot and device monitor)
MIN_PLOTS = {
    "02_optimizers.ipynb": 4,
    "03_data_parallel.ipynb": 3,
    "04_model_parallel.ipynb": 17,
    "06_hardware_and_estimates.ipynb": 4,
    "08_your_own_model.ipynb": 5,
}


def _assert_dashboard_shows_what_the_kernel_holds(page, name: str) -> dict[str, int]:
    """The notebook prints its Dashboard plot's point counts; the page's plot must hold the same."""
    outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
    line = next(t for t in outputs if "points in the loss plot:" in t)
    expected = ast.literal_eval(line.split("points in the loss plot:", 1)[1].strip().splitlines()[0])
    dashboard = page.locator(".workbench-dashboard")
    assert dashboard.count() == 1, "the Dashboard widget is not in the page"
    dashboard.scroll_into_view_if_needed()
    dashboard.screenshot(path=str(ARTIFACTS / f"{name}_dashboard.png"))
    in_page = dashboard.locator(".js-plotly-plot").first.evaluate(
        "plot => Object.fromEntries(plot.data.map(trace => [trace.name, trace.x.length]))"
    )
    assert in_page == expected, f"loss plot in the page {in_page} != the kernel's {expected}"
    assert expected and all(n > 0 for n in expected.values())

    bar = dashboard.locator(".progress-bar").first.evaluate("bar => bar.style.width")
    assert bar == "100%", f"progress bar at {bar}"
    return in_page
