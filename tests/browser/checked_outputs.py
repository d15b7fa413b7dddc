"""The checked cells of a notebook run in the page, compared with the outputs stored in the repository as
nbval compares them (``--nbval-lax``: only cells marked ``# NBVAL_CHECK_OUTPUT``; streams coalesced, ``\\r``
applied, each stream, result and display compared by its text and data, never by ids, numbers, metadata or
pictures). The browser test runs each notebook once, in the page; this is the comparison nbval made on its
own run.

    >>> stored = {"cells": [{"cell_type": "code", "source": "# NBVAL_CHECK_OUTPUT\\nprint(2)",
    ...     "outputs": [{"output_type": "stream", "name": "stdout", "text": "2\\n"}]}]}
    >>> ran = {"cells": [{"cell_type": "code", "source": "# NBVAL_CHECK_OUTPUT\\nprint(2)",
    ...     "outputs": [{"output_type": "stream", "name": "stdout", "text": "3\\n"}]}]}
    >>> ran["cells"][0]["outputs"][0]["text"] = ["2", "\\n"]  # JSON may hold a text as a list of lines
    >>> differing_checked_cells(stored, ran)
    []
    >>> ran["cells"][0]["outputs"][0]["text"] = "3\\n"
    >>> differing_checked_cells(stored, ran)
    ["code cell 0: stdout: stored ['2\\\\n'], ran ['3\\\\n']"]
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import nbformat
from nbval.plugin import coalesce_streams

CHECKED = "# NBVAL_CHECK_OUTPUT"
# nbval's skip list (nbval.plugin.IPyNbFile.skip_compare, without --nbdime)
NOT_COMPARED = frozenset(
    {
        "metadata", "traceback", "prompt_number", "output_type", "execution_count",
        "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg",
    }
)  # fmt: skip


def _text(value: Any) -> Any:
    return "".join(value) if isinstance(value, list) else value


def comparable(outputs: list[dict]) -> dict[str, list]:
    """`outputs` as nbval compares them: per key (a stream's name, a data mime type, ``ename``...) the
    values of every output in order."""
    nodes = [  # copies, texts joined (JSON may hold a list of lines): coalescing edits them
        nbformat.from_dict(
            {
                **output,
                **({"text": _text(output["text"])} if "text" in output else {}),
                **({"data": {k: _text(v) for k, v in output["data"].items()}} if "data" in output else {}),
            }
        )
        for output in outputs
    ]
    flat: dict[str, list] = defaultdict(list)
    for output in coalesce_streams(nodes):
        if output.output_type == "stream":
            flat[output.name].append(_text(output.text))
            continue
        for key, value in output.items():
            if key == "data":
                for mime, data in value.items():
                    if mime not in NOT_COMPARED:
                        flat[mime].append(_text(data))
            elif key not in NOT_COMPARED:
                flat[key].append(_text(value))
    return dict(flat)


def differing_checked_cells(stored: dict, ran: dict) -> list[str]:
    """One line per checked code cell whose outputs in `ran` differ from those in `stored` (both nbformat
    JSON of the same notebook; the cells matched by their place among the code cells)."""
    stored_code = [cell for cell in stored["cells"] if cell["cell_type"] == "code"]
    ran_code = [cell for cell in ran["cells"] if cell["cell_type"] == "code"]
    assert len(stored_code) == len(ran_code), f"{len(ran_code)} code cells ran, {len(stored_code)} stored"
    differing = []
    for index, (kept, new) in enumerate(zip(stored_code, ran_code, strict=True)):
        if CHECKED not in _text(kept["source"]):
            continue
        expected, got = comparable(kept.get("outputs", [])), comparable(new.get("outputs", []))
        for key in sorted(expected.keys() | got.keys()):
            if expected.get(key) != got.get(key):
                differing.append(f"code cell {index}: {key}: stored {expected.get(key)}, ran {got.get(key)}")
    return differing
