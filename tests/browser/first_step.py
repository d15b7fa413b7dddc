"""How long a newcomer waits for the tour's first training step: Run All in JupyterLab, timed in the page.

Each run copies ``notebooks/00_tour.ipynb`` (a fresh kernel each time), opens it, presses Run All and times,
from the click, when the Dashboard's status line first shows a step and when its loss plot first holds a
point. Three ways, each round in another order:

- ``cold``: a kernel that imports nothing ahead (``WORKBENCH_PRELOAD=0``), Run All as soon as it is idle;
- ``at-idle``: the `workbench` kernel as installed (it imports the tutorials' modules while it waits,
  `workbench.kernel_preload`), Run All as soon as it is idle: the worst case;
- ``after-reading``: the same kernel, Run All ``--read`` seconds (default 10) after it is idle, as a
  newcomer who reads the notebook's first lines first.

Prints every run, then the median and range of each. Needs what the browser tests need (Chromium, Playwright):

    $ .venv/bin/python -m tests.browser.first_step --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
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
    sessions_of,
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


def time_first_step(page, url: str, notebook: str, read_s: float) -> tuple[float, float]:
    """(seconds from Run All until the status line shows a step, until the loss plot holds a point)."""
    open_notebook(page, url, notebook)
    time.sleep(read_s)
    clicked = page.evaluate("performance.now()")
    press_run_all(page)
    shown = page.wait_for_function(STEP_SHOWN_JS, polling="raf", timeout=180_000).json_value()
    drawn = page.wait_for_function(POINT_DRAWN_JS, polling="raf", timeout=180_000).json_value()
    return (shown - clicked) / 1000, (drawn - clicked) / 1000


def install_cold_kernel(root: Path) -> None:
    """A kernelspec `workbench-cold` under `root` (on JUPYTER_PATH): the workbench kernel, preloading off."""
    spec = json.loads((Path(sys.prefix) / "share/jupyter/kernels/workbench/kernel.json").read_text())
    spec["env"] = {**spec.get("env", {}), "WORKBENCH_PRELOAD": "0"}
    folder = root / "jupyter" / "kernels" / "workbench-cold"
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(spec))
    os.environ["JUPYTER_PATH"] = str(root / "jupyter")


def shut_down_kernel(url: str, notebook: str) -> None:
    for session in sessions_of(url, notebook):
        address, headers = f"{url}/api/sessions/{session['id']}", {"Authorization": f"token {TOKEN}"}
        urllib.request.urlopen(urllib.request.Request(address, headers=headers, method="DELETE")).close()


def _summary(name: str, seconds: list[float]) -> str:
    median, low, high = statistics.median(seconds), min(seconds), max(seconds)
    return f"{name}: median {median:.2f} s (range {low:.2f}–{high:.2f} s, {len(seconds)} runs)"


WAYS = ("cold", "at-idle", "after-reading")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds of the three ways (default 5)")
    parser.add_argument("--read", type=float, default=10.0, help="seconds after-reading waits (default 10)")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    seconds: dict[str, tuple[list[float], list[float]]] = {way: ([], []) for way in WAYS}
    with tempfile.TemporaryDirectory() as folder:
        install_cold_kernel(Path(folder))
        with running_lab(Path(folder), free_port()) as lab, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_executable(), args=CHROMIUM_FLAGS)
            for run in range(args.runs):
                for way in WAYS[run % 3 :] + WAYS[: run % 3]:  # each way first, second and third in turn
                    notebook = f"first_step_{run}_{way}.ipynb"
                    tour = json.loads(TOUR.read_text())
                    if way == "cold":
                        tour["metadata"]["kernelspec"]["name"] = "workbench-cold"
                    (lab.notebooks / notebook).write_text(json.dumps(tour))
                    context = browser.new_context(viewport={"width": 1400, "height": 2400})
                    try:
                        read_s = args.read if way == "after-reading" else 0.0
                        step_s, point_s = time_first_step(context.new_page(), lab.url, notebook, read_s)
                    finally:
                        context.close()
                        shut_down_kernel(lab.url, notebook)
                    seconds[way][0].append(step_s)
                    seconds[way][1].append(point_s)
                    print(f"run {run + 1} {way}: a step in the status line at {step_s:.2f} s, on the plot at "
                          f"{point_s:.2f} s", flush=True)  # fmt: skip
            browser.close()
    for way, (shown, drawn) in seconds.items():
        print(_summary(f"{way}: status line shows a step", shown))
        print(_summary(f"{way}: loss plot shows a point", drawn))


if __name__ == "__main__":
    main()
