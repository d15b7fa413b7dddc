"""The browser tests' reading of the lab's notebook files."""

from __future__ import annotations

import json
import threading
import time

from tests.browser.jupyterlab import count_code_cells


def test_a_notebook_read_while_the_lab_saves_it_is_read_again(tmp_path):
    """jupyter_server saves a notebook in place: a read in between finds it empty (a clean-clone CI's
    JSONDecodeError); the count waits for the saved file."""
    path = tmp_path / "saving.ipynb"
    path.write_text("")
    cells = [{"cell_type": "code"}, {"cell_type": "markdown"}, {"cell_type": "code"}]

    def save() -> None:
        time.sleep(0.5)
        path.write_text(json.dumps({"cells": cells}))

    saver = threading.Thread(target=save)
    saver.start()
    try:
        assert count_code_cells(path) == 2
    finally:
        saver.join()
