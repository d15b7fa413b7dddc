"""How long a newcomer waits for the tour's first training step: Run All in JupyterLab, timed in the page.

Each run copies ``notebooks/00_tour.ipynb`` (a fresh kernel each time), opens it, presses Run All as soon as
the kernel is idle (the worst case: nothing imported ahead) and times, from the click, when the Dashboard's
status line first shows a step and when its loss plot first holds a point. Prints every run, then the median
and range of each. Needs what the browser tests need (Chromium, Playwright):

    $ .venv/bin/python -m tests.browser.first_step --runs 5
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import urllib.request
from pathlib import Path

from tests.browser.jupyterlab import (
    CHROMIUM_FLAGS,
    REPO,
    TOKEN,
    chromium_executable,
    open_notebook,
    press_run_all,
    running_lab,
)
from workbench.parallel.launching.launcher import free_port

TOUR = REPO / "notebooks" / "00_tour.ipynb"
# The page's clock when the status line first shows a step, and when the loss plot first holds a point
STEP_SHOWN_JS = """() => {
    const status = document.querySelector('.workbench-dashboard .workbench-status');
    return status && /step [1-9]\\d*\\//.test(status.innerText) ? performance.now() : false;
}"""
POINT_DRAWN_JS = """() => {
    const plot = document.querySelector('.workbench-dashboard .js-plotly-plot');
    const filled = (t) => t.x && (t.x.length || (t.x.bdata && t.x.bdata.length));
    return (plot && plot.data || []).some(filled) ? performance.now() : false;
}"""


def time_first_step(page, url: str, notebook: str) -> tuple[float, float]:
    """(seconds from Run All until the status line shows a step, until the loss plot holds a point)."""
    open_notebook(page, url, notebook)
    clicked = page.evaluate("performance.now()")
    press_run_all(page)
    shown = page.wait_for_function(STEP_SHOWN_JS, polling="raf", timeout=180_000).json_value()
    drawn = page.wait_for_function(POINT_DRAWN_JS, polling="raf", timeout=180_000).json_value()
    return (shown - clicked) / 1000, (drawn - clicked) / 1000


def shut_down_kernel(url: str, notebook: str) -> None:
    headers = {"Authorization": f"token {TOKEN}"}
    with urllib.request.urlopen(urllib.request.Request(f"{url}/api/sessions", headers=headers)) as answer:
        sessions = [s for s in json.loads(answer.read()) if s["path"] == notebook]
    for session in sessions:
        address = f"{url}/api/sessions/{session['id']}"
        urllib.request.urlopen(urllib.request.Request(address, headers=headers, method="DELETE")).close()


def _summary(name: str, seconds: list[float]) -> str:
    median, low, high = statistics.median(seconds), min(seconds), max(seconds)
    return f"{name}: median {median:.2f} s (range {low:.2f}–{high:.2f} s, {len(seconds)} runs)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh kernels to time (default 5)")
    runs = parser.parse_args(argv).runs
    from playwright.sync_api import sync_playwright

    shown, drawn = [], []
    with (
        tempfile.TemporaryDirectory() as root,
        running_lab(Path(root), free_port()) as lab,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=chromium_executable(), args=CHROMIUM_FLAGS)
        for run in range(runs):
            notebook = f"first_step_{run}.ipynb"
            shutil.copy(TOUR, lab.notebooks / notebook)
            context = browser.new_context(viewport={"width": 1400, "height": 2400})
            try:
                step_s, point_s = time_first_step(context.new_page(), lab.url, notebook)
            finally:
                context.close()
                shut_down_kernel(lab.url, notebook)
            shown.append(step_s)
            drawn.append(point_s)
            print(
                f"run {run + 1}: a step in the status line at {step_s:.2f} s, on the plot at {point_s:.2f} s"
            )
        browser.close()
    print(_summary("status line shows a step", shown))
    print(_summary("loss plot shows a point", drawn))


if __name__ == "__main__":
    main()
