"""`Trainer.fit()` shows progress by default where a person watches: a widget bar in a notebook, one line
that updates on a terminal's stderr; none in a pipe or a CI log, on other ranks, in a launcher's workers
(the launcher shows it) or beside a Dashboard; ``progress=False`` silences it, ``progress=True`` forces it.

The terminal case runs a script on a pseudo-terminal, the notebook case executes cells in a real kernel
(nbclient, which keeps the widgets' final state as JupyterLab would show it)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from workbench.train.events import CallbackList
from workbench.train.progress import ConsoleProgress, NotebookProgress, fit_progress
from workbench.train.supervision import Supervision
from workbench.train.supervision import supervised as supervised_by

FIT = """
from workbench.presets import build_experiment
from workbench.train import Trainer
e = build_experiment("digits-mlp", epochs=2)
print(Trainer(e.model, e.loss_fn, e.splits, e.config{options}).fit().status)
"""


def _on_a_terminal(script: str, cwd) -> tuple[str, str]:
    """Run `script` with its stderr on a 120-column pseudo-terminal, as in a shell: (stdout, stderr)."""
    main, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-c", script], cwd=cwd, stdout=subprocess.PIPE, stderr=secondary
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the script ended: the terminal closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    stdout = process.communicate(timeout=120)[0]
    return stdout.decode(), b"".join(chunks).decode()


def test_a_fit_on_a_terminal_shows_one_line_that_updates_and_a_pipe_shows_none(tmp_path):
    stdout, stderr = _on_a_terminal(FIT.format(options=""), tmp_path)
    assert stdout == "finished\n"
    bar, end = stderr.rstrip("\r\n").rsplit("\r\n", 1)
    assert end == "finished at step 46", stderr
    assert "\n" not in bar and "46/46" in bar.split("\r")[-1] and "val=loss" in bar, bar  # one line, redrawn
    piped = subprocess.run([sys.executable, "-c", FIT.format(options="")], cwd=tmp_path, capture_output=True)
    assert (piped.stdout, piped.stderr) == (b"finished\n", b"")


NOTEBOOK_CELLS = [
    FIT.format(options=""),  # a widget bar
    FIT.format(options=", progress=False"),  # none
    """from workbench.widgets import Dashboard
dashboard = Dashboard(Trainer(e.model, e.loss_fn, e.splits, e.config), monitor=False)
print(dashboard.fit().status)""",  # the Dashboard's own bar, not displayed here: none
    """from workbench.parallel import launch
def train(strategy):
    return Trainer(e.model, e.loss_fn, e.splits, e.config, strategy=strategy).fit()
print(launch(train, 2, verbose=False).status)""",  # workers forked from this kernel: none
]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_a_fit_in_a_notebook_shows_a_widget_bar_that_fills_and_nothing_else(tmp_path):
    nbclient = pytest.importorskip("nbclient")
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in NOTEBOOK_CELLS]
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=180,
        store_widget_state=True,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    outputs = [cell.outputs for cell in notebook.cells]
    texts = [[output.get("text") for output in cell if output.output_type == "stream"] for cell in outputs]
    assert texts == [["finished\n"]] * 4
    displays = [
        [dict(output.data) for output in cell if output.output_type == "display_data"] for cell in outputs
    ]
    assert [len(shown) for shown in displays] == [1, 0, 0, 0], displays
    assert list(displays[0][0]) == [WIDGET_VIEW]  # no text copy: a cell's text output stays as it was
    state = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    bars = [model["state"] for model in state.values() if model["model_name"] == "FloatProgressModel"]
    assert [(bar["value"], bar["max"], bar["bar_style"]) for bar in bars] == [(46, 46, "success")]
    labels = [
        model["state"]["value"].replace("\u2007", " ")
        for model in state.values()
        if model["model_name"] == "HTMLModel"
    ]
    assert any(label.startswith("train finished at step 46") for label in labels), labels


@pytest.mark.parametrize(
    ("progress", "callbacks", "is_main", "supervised", "shown"),
    [
        (None, [], True, False, None),  # stderr is a pipe under pytest: nobody watches
        (True, [], True, False, ConsoleProgress),
        (True, [ConsoleProgress()], True, False, None),  # a callback shows it already
        (
            True,
            [CallbackList([ConsoleProgress()])],
            True,
            False,
            None,
        ),  # inside a wrapper too (a Dashboard's)
        (True, [], False, False, None),  # another rank
        (True, [], True, True, None),  # a launcher's worker
        (False, [], True, False, None),
    ],
)
def test_who_shows_the_bar(progress, callbacks, is_main, supervised, shown):
    context = supervised_by(Supervision()) if supervised else contextlib.nullcontext()
    with context:
        bar = fit_progress(progress, CallbackList(callbacks), is_main=is_main)
    assert (bar if shown is None else type(bar)) is shown
    assert not isinstance(bar, NotebookProgress)
