"""JupyterLab in headless Chromium (Playwright), shared by the browser tests: a lab on a copy of notebooks/,
a page, Run All, and reading what the page shows.

Needs Debian's chromium (``WORKBENCH_CHROMIUM``, default ``/usr/bin/chromium``). Under ``make test`` (which
installs it) a missing browser fails the test; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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


def chromium_executable() -> str:
    path = os.environ.get("WORKBENCH_CHROMIUM") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        if os.environ.get("WORKBENCH_CHROMIUM"):
            pytest.fail(f"{path} is missing; `make test` installs it with apt-get install chromium")
        pytest.skip(f"no browser at {path} (run under `make test`, or apt-get install chromium)")
    return path


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab: its base URL and the folder it serves (a copy of notebooks/)."""

    url: str
    notebooks: Path


@pytest.fixture(scope="module")
def lab(tmp_path_factory, free_port):
    """A JupyterLab server on a copy of notebooks/ (JupyterLab's settings from this environment, so the
    news pop-up is off as under `make lab`); yields a `Lab`."""
    with running_lab(tmp_path_factory.mktemp("lab"), free_port()) as running:
        yield running


@contextmanager
def running_lab(root: Path, port: int) -> Iterator[Lab]:
    """JupyterLab on `port`, serving a copy of notebooks/ under `root`, with settings of its own there."""
    shutil.copytree(REPO / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("runs", ".ipynb_*"))
    # Render every cell (JupyterLab 4 virtualises long notebooks), in a settings folder of our own.
    settings = root / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser",
        f"--ServerApp.root_dir={root / 'notebooks'}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        f"--IdentityProvider.token={TOKEN}", "--ServerApp.allow_root=True",
        f"--LabApp.workspaces_dir={root / 'workspaces'}",  # never restore a user's open tabs
        f"--LabApp.user_settings_dir={root / 'settings'}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: the tests read the model, run cells
    ]  # fmt: skip
    env = {**os.environ, "JUPYTER_PREFER_ENV_PATH": "1"}
    env.pop("WORKBENCH_ANSWERS", None)  # a learner's Run All: the %%answer cells stay unrun, the stubs stay
    # ipykernel forwards what C code and child processes write to the kernel's stderr (fd 2) into the cell,
    # as a learner sees it, except under pytest, which it recognises by this variable
    env.pop("PYTEST_CURRENT_TEST", None)
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
        yield Lab(url, root / "notebooks")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for a module's tests (each gets a fresh context and page: no shared state)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_executable(), args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser):
    """A fresh page (1400×2400: a Dashboard fits) in a context of its own, closed after the test."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 2400})
    try:
        yield context.new_page()
    finally:
        context.close()


def start_run_all(page, url: str, notebook: str) -> None:
    """Open `notebook` alone, wait for its kernel, press Run ▸ Run All Cells; returns at once."""
    open_notebook(page, url, notebook)
    press_run_all(page)


def open_notebook(page, url: str, notebook: str) -> None:
    """Open `notebook` alone and wait until its kernel is connected and idle."""
    page.goto(f"{url}/lab/tree/{notebook}?reset&token={TOKEN}")  # reset: only this notebook open
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    # Run only once the kernel is connected; earlier, JupyterLab asks "Select Kernel" instead of running.
    page.wait_for_selector("text=Python (workbench) | Idle", timeout=90_000)
    assert page.locator(".jp-Dialog").count() == 0, "a dialog opened (kernel selection?)"


def press_run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def run_all_cells(page, lab: Lab, notebook: str, timeout_s: float) -> None:
    """Run All, then wait until every code cell ran once, in order, and the kernel is idle."""
    start_run_all(page, lab.url, notebook)
    wait_for_run_all(page, lab, notebook, timeout_s)


def count_code_cells(path: Path, timeout_s: float = 10.0) -> int:
    """The code cells of the notebook at `path`, read while the lab may be saving it: jupyter_server writes a
    notebook in place (after keeping a backup), so a read can find it empty or cut short (the clean-clone CI
    of 4c00228 did: JSONDecodeError on 04a's file); such a read is tried again, for `timeout_s` at most."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            cells = json.loads(path.read_text())["cells"]
        except json.JSONDecodeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        return sum(cell["cell_type"] == "code" for cell in cells)


def wait_for_run_all(page, lab: Lab, notebook: str, timeout_s: float) -> None:
    """Wait until every code cell of `notebook` (Run All pressed in `page`) ran once, in order, and the kernel
    is idle; else a screenshot and an AssertionError listing the prompts."""
    # Done when the code cells are numbered [1], [2], … [n] in order (a fresh kernel ran each once; stored
    # numbers of checked outputs do not look like that) and the kernel is idle again.
    code_cells = count_code_cells(lab.notebooks / notebook)
    started = time.monotonic()
    try:
        wait_until_all_ran(page, code_cells, timeout_s)
        # Collapsed cells show no prompt: when the last cells are (an exercise's answers), the prompts above
        # are all numbered while those still run. The kernel then tells: idle, no cell run for a while.
        wait_until_kernel_quiet(lab, notebook, timeout_s - (time.monotonic() - started))
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{notebook}-unfinished.png"), full_page=True)
        prompts = page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
        raise AssertionError(f"{notebook} did not finish running; prompts: {prompts}") from None


class NotebookRuns:
    """Run All in several notebooks at once, each in a page of its own, as a user with two tabs of one lab.

    `finished(notebook)` starts `notebook` if it is not running yet, then the next ones of `order` (up to
    `window` running at a time), and waits until `notebook` ran; a test checks its page while the next
    notebook computes. `close(notebook)` closes its page. A notebook run leaves 2 cores partly idle (page
    loads, kernel starts, rendezvous, throttled plots): on them, the nine notebooks took 285 s one at a time,
    263 s two at a time and 247 s three at a time.
    """

    def __init__(self, browser, lab: Lab, order: list[str], window: int = 2) -> None:
        self.browser, self.lab, self.order, self.window = browser, lab, order, window
        self.running: dict[str, tuple[Any, Any, list[int], BaseException | None]] = {}
        self.closed: set[str] = set()

    def _start(self, notebook: str) -> None:
        context = self.browser.new_context(viewport={"width": 1400, "height": 2400})
        page = context.new_page()
        received: list[int] = []  # the size of every websocket message the page receives
        page.on(
            "websocket", lambda socket: socket.on("framereceived", lambda data: received.append(len(data)))
        )
        error = None
        try:
            start_run_all(page, self.lab.url, notebook)
        except Exception as failure:  # reported by this notebook's own test
            error = failure
        self.running[notebook] = (context, page, received, error)

    def finished(self, notebook: str, timeout_s: float) -> tuple[Any, list[int]]:
        """(page, sizes of the websocket messages it received) once Run All of `notebook` is done."""
        if notebook not in self.running:
            self._start(notebook)
        later = self.order[self.order.index(notebook) + 1 :] if notebook in self.order else []
        for upcoming in later:
            if len([n for n in self.running if n not in self.closed]) >= self.window:
                break
            if upcoming not in self.running:
                self._start(upcoming)
        _, page, received, error = self.running[notebook]
        if error is not None:
            raise error
        wait_for_run_all(page, self.lab, notebook, timeout_s)
        return page, received

    def close(self, notebook: str) -> None:
        if notebook in self.running and notebook not in self.closed:
            self.closed.add(notebook)
            self.running[notebook][0].close()

    def close_all(self) -> None:
        for notebook in list(self.running):
            self.close(notebook)


def wait_until_all_ran(page, code_cells: int, timeout_s: float) -> None:
    page.wait_for_function(
        """(codeCells) => {
            const cells = [...document.querySelectorAll('.jp-CodeCell')];
            const busy = document.querySelector(".jp-Notebook-ExecutionIndicator[data-status='busy']");
            // a cell whose input is collapsed (an exercise's answer) shows no prompt: the next one counts it
            const numbered = cells.every((cell, i) => {
                const prompt = cell.querySelector('.jp-InputArea-prompt');
                if (!prompt) return !!cell.querySelector('.jp-InputPlaceholder');
                return prompt.textContent.trim() === `[${i + 1}]:`;
            });
            return cells.length === codeCells && !busy && numbered;
        }""",
        arg=code_cells,
        timeout=timeout_s * 1000,
    )


def sessions_of(url: str, notebook: str) -> list[dict]:
    """The lab's sessions (each with its kernel's state) of `notebook`."""
    with urllib.request.urlopen(f"{url}/api/sessions?token={TOKEN}", timeout=10) as answer:
        return [session for session in json.loads(answer.read()) if session["path"] == notebook]


def wait_until_kernel_quiet(lab: Lab, notebook: str, timeout_s: float, quiet_s: float = 3.0) -> None:
    """Until the kernel of `notebook`'s session is idle and ran no cell for `quiet_s` seconds (Run All sends
    every cell at once, so between two cells the kernel is idle for milliseconds only)."""
    deadline = time.monotonic() + timeout_s
    while True:
        kernel = sessions_of(lab.url, notebook)[0]["kernel"]
        quiet = datetime.now(UTC) - datetime.fromisoformat(kernel["last_activity"].replace("Z", "+00:00"))
        if kernel["execution_state"] == "idle" and quiet.total_seconds() >= quiet_s:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{notebook}'s kernel is still {kernel['execution_state']}")
        time.sleep(0.5)


def notebook_in_page(page) -> dict:
    """The notebook of `page` (one open, see `open_notebook`) as its model holds it: nbformat JSON, each
    code cell with the outputs the page received."""
    return page.evaluate(f"() => {_PANEL_JS}.content.model.toJSON()")


def run_cells_again(page, indices: list[int], setup: str) -> None:
    """Run `setup` in the kernel of `page`'s notebook (silently), then each cell of `indices` (positions
    among all cells) in that order, as a user selects a cell and presses Ctrl+Enter; returns when the last
    one ran."""
    page.evaluate(
        f"""async ([indices, setup]) => {{
            const app = window.jupyterapp, panel = {_PANEL_JS};
            const kernel = panel.sessionContext.session.kernel;
            await kernel.requestExecute({{code: setup, silent: true, store_history: false}}).done;
            for (const index of indices) {{
                panel.content.activeCellIndex = index;
                panel.content.deselectAll();
                await app.commands.execute('notebook:run-cell');
            }}
        }}""",
        [indices, setup],
    )


# The page's one notebook (JupyterLab's app object, exposed by --LabApp.expose_app_in_browser).
_PANEL_JS = "Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.content && w.sessionContext)"


def errors_in_page(page) -> list[str]:
    stderr = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
    texts = page.locator(stderr).all_inner_texts()
    return [t for t in texts if re.search(r"Traceback|Error\b", t)]
