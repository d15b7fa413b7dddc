"""The tutorial path: every notebook in notebooks/ is collected by nbval (none silently skipped), and every
exercise comes with an answer a learner can open."""

import base64
import io
import re
import subprocess
import sys

import nbformat

from tests.browser.stored_figures import is_figure
from tests.conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_nbval_collects_every_code_cell_of_every_notebook():
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--nbval-lax", "-p", "no:cacheprovider",
         "notebooks"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stdout + listed.stderr
    collected: dict[str, int] = {}
    for line in listed.stdout.splitlines():
        if ".ipynb::Cell" in line:
            name = line.split("::", 1)[0].rsplit("/", 1)[-1]
            collected[name] = collected.get(name, 0) + 1
    for path in NOTEBOOKS:
        code_cells = sum(c.cell_type == "code" for c in nbformat.read(path, as_version=4).cells)
        assert collected.get(path.name) == code_cells, (
            f"{path.name}: {collected.get(path.name)} of {code_cells}"
        )


def test_every_checked_cell_keeps_its_expected_output():
    for path in NOTEBOOKS:
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code" and "# NBVAL_CHECK_OUTPUT" in cell.source:
                assert cell.outputs, f"{path.name} cell {index} is checked but stores no output to compare"


def test_notebooks_store_no_widget_state_and_stay_small():
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        assert "widgets" not in notebook.metadata, f"{path.name} stores widget state (clear it before saving)"
        pictures = sum(len(picture) for _, picture in _stored_figures(notebook))
        # 110 kB: 03 holds four ranks' stored output for each %%ranks cell (104 kB); split a notebook past it
        text = path.stat().st_size - pictures
        assert text < 110_000, f"{path.name} is {text:,} bytes besides its pictures"
        assert pictures < 900_000, f"{path.name} stores {pictures:,} bytes of pictures"


def test_stored_prompts_never_read_as_a_finished_run_all():
    """The browser tests take prompts [1], [2], … [n] in order as "Run All finished": stored ones must not."""
    for path in NOTEBOOKS:
        code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        counts = [cell.execution_count for cell in code]
        assert counts != list(range(1, len(code) + 1)), f"{path.name} stores the prompts of a whole Run All"


def test_every_notebook_stores_pictures_of_its_plots_for_readers_on_github():
    """GitHub and nbviewer run no widget: `make figures` stores a JPEG of each cell's plots beside them."""
    from PIL import Image

    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        figures = _stored_figures(notebook)
        assert figures, f"{path.name} stores no picture of its plots: run `make figures`"
        for cell, picture in figures:
            assert "# NBVAL_CHECK_OUTPUT" not in cell.source, f"{path.name}: a picture in a checked cell"
            assert isinstance(cell.execution_count, int), f"{path.name}: nbval refuses outputs with no number"
            image = Image.open(io.BytesIO(base64.b64decode(picture)))
            assert image.format == "JPEG" and image.width <= 760 and image.height > 100, (path.name, image)


def _stored_figures(notebook) -> list[tuple[object, str]]:
    """(cell, base64 JPEG) of each picture `make figures` stored (tests/browser/stored_figures.py)."""
    return [
        (cell, output["data"]["image/jpeg"])
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if is_figure(output)
    ]


def _exercises(notebook) -> tuple[int, list[str]] | None:
    """(index of the cell, its numbered items) of the notebook's "## Exercises" section, if it has one."""
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown" and "## Exercises" in cell.source:
            section = cell.source[cell.source.index("## Exercises") :]
            return index, re.split(r"^\d+\. ", section, flags=re.M)[1:]
    return None


def _collapsed(cell) -> bool:
    return cell.metadata.get("jupyter", {}).get("source_hidden", False)


def test_every_exercise_has_an_answer_to_open():
    with_exercises = 0
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        found = _exercises(notebook)
        if found is None:
            continue
        with_exercises += 1
        index, items = found
        assert items, f"{path.name}: an Exercises section without numbered exercises"
        for number, item in enumerate(items, 1):
            answer = item.find("<details><summary>Answer</summary>")
            assert answer >= 0 and "</details>" in item[answer:], (
                f"{path.name}: exercise {number} has no answer"
            )
            if re.search(r"collapsed\s+(`%%answer`\s+)?cell below", item):  # the answer is code that CI runs
                following = notebook.cells[index + 1]
                where = f"{path.name}: exercise {number}'s answer, cell {index + 1},"
                assert following.cell_type == "code" and _collapsed(following), (
                    f"{where} is no collapsed code"
                )
    assert with_exercises >= 8


def test_answer_cells_start_collapsed_unrun_and_after_the_learners_stub():
    """Each exercise waits for the learner: the stub (a `your_turn()` body, or ``...``), then one answer in a
    collapsed ``%%answer`` cell, which Run All leaves unrun (tests/browser runs them so)."""
    answers = 0
    for path in NOTEBOOKS:
        cells = nbformat.read(path, as_version=4).cells
        for index, cell in enumerate(cells):
            if cell.cell_type == "code" and re.search(r"^# (One answer|Answers?)\b", cell.source, flags=re.M):
                answers += 1
                where = f"{path.name} cell {index}"
                assert _collapsed(cell), f"{where} holds an answer but is not collapsed"
                assert cell.source.startswith("%%answer\n"), f"{where} holds an answer that Run All would run"
                before = cells[index - 1]
                if before.cell_type == "markdown":  # an answer to an Exercises item: the learner adds a cell
                    continue
                stub = before.source
                waits = "your_turn()" in stub or " = ...  # your turn" in stub or stub.startswith("%%answer")
                assert waits, f"{where}: no stub before it"
    assert answers >= 13


QUOTED = re.compile(r"(\S+)<!--out-->")  # a value the text quotes from the notebook's own stored output


def _output_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", "") or output.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def test_values_the_text_quotes_from_stored_outputs_are_in_them():
    """A value marked ``1.53×<!--out-->`` in a markdown cell (the marker renders as nothing) must appear in
    the notebook's stored outputs: re-running a cell and keeping new outputs fails here until the text says
    what they say (issue 43: four such statements had drifted)."""
    quoted = 0
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        outputs = "\n".join(_output_text(cell) for cell in notebook.cells if cell.cell_type == "code")
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "markdown":
                continue
            for token in QUOTED.findall(cell.source):
                value = token.lstrip("(").rstrip(",;:)")
                quoted += 1
                assert value in outputs, (
                    f"{path.name} cell {index} quotes {value!r} from a stored output, and no stored output "
                    "holds it: say what the outputs say now"
                )
    assert quoted >= 6
