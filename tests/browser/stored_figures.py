"""Pictures of a notebook's plots, stored in its outputs, so GitHub and nbviewer (which run no kernel and no
widget) show the figures a reader would see after Run All and the exercises.

`make figures` runs the notebooks in JupyterLab (the browser test, ``WORKBENCH_STORE_FIGURES=1``); after a
notebook's checks pass and its answers ran (the plots only an answer draws included), `store_figures`
photographs the output of every code cell that drew a plotly plot and
writes it into ``notebooks/<name>.ipynb`` as one more output of that cell: a JPEG, marked ``{"workbench":
"figure"}`` in its metadata, replacing the one an earlier run stored. Running a cell replaces its outputs,
the picture too, so a learner sees the live plot. Checked cells (``# NBVAL_CHECK_OUTPUT``) get none: nbval
compares their outputs. A cell given a picture gets a number if it had none (nbval refuses outputs without
one): its place among the code cells, as Run All numbers it.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import nbformat

FIGURE = {"workbench": "figure"}  # the metadata that marks a stored picture
WIDTH = 760  # pixels: a picture is scaled down to this width
QUALITY = 70  # JPEG quality
CAPTION = "[a picture of this cell's plots, stored by `make figures`: run the cell for the live plots]"


def is_figure(output) -> bool:
    return output.get("output_type") == "display_data" and output.get("metadata") == FIGURE


def store_figures(page, notebook: Path) -> int:
    """Photograph the output of each code cell in `page` that holds a plotly plot and store it in `notebook`
    (the repository's file); returns how many pictures were stored."""
    from PIL import Image

    stored = nbformat.read(notebook, as_version=4)
    code = [cell for cell in stored.cells if cell.cell_type == "code"]
    in_page = page.locator(".jp-CodeCell")
    assert in_page.count() == len(code), (
        f"{notebook.name}: {in_page.count()} code cells in the page, {len(code)} in the file"
    )
    page.set_viewport_size({"width": 1400, "height": 4000})  # a Dashboard whole, below the toolbar
    count = 0
    for index, cell in enumerate(code):
        cell.outputs = [output for output in cell.outputs if not is_figure(output)]
        if "# NBVAL_CHECK_OUTPUT" in cell.source:
            continue
        outputs = in_page.nth(index).locator(".jp-OutputArea")
        if outputs.locator(".js-plotly-plot").count() == 0:
            continue
        outputs.scroll_into_view_if_needed()
        picture = Image.open(io.BytesIO(outputs.screenshot())).convert("RGB")
        if picture.width > WIDTH:
            picture = picture.resize((WIDTH, round(picture.height * WIDTH / picture.width)), Image.LANCZOS)
        jpeg = io.BytesIO()
        picture.save(jpeg, "JPEG", quality=QUALITY, optimize=True)
        cell.outputs.append(
            nbformat.v4.new_output(
                "display_data",
                data={"image/jpeg": base64.b64encode(jpeg.getvalue()).decode(), "text/plain": CAPTION},
                metadata=dict(FIGURE),
            )
        )
        if cell.execution_count is None:  # nbval refuses a cell with outputs and no number
            cell.execution_count = index + 1  # as Run All numbers it
        count += 1
    nbformat.write(stored, notebook)
    return count
