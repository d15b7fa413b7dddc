"""Plain-text and HTML tables for reports (device report, benchmarks)."""

from __future__ import annotations

import html
from collections.abc import Sequence


def text_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns under ``headers``, separated by two spaces, with a dashed rule."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def html_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, caption: str = "", cell_style: str = ""
) -> str:
    """The same table as HTML, escaped, for ``_repr_html_`` in notebooks; `cell_style` is CSS added to every
    header and cell (``padding: 2px 12px 2px 0`` spaces the columns out where the page does not)."""
    style = "text-align:left" + (f";{cell_style}" if cell_style else "")
    head = "".join(f"<th style='{style}'>{html.escape(str(h))}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td style='{style}'>{html.escape(str(c))}</td>" for c in row) + "</tr>"
        for row in rows
    )
    cap = f"<caption style='text-align:left'><b>{html.escape(caption)}</b></caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table (``|`` inside a cell escaped).

    Example:
        >>> print(markdown_table(["a", "b"], [[1, "x|y"]]))
        | a | b |
        | --- | --- |
        | 1 | x\\|y |
    """

    def line(cells: Sequence[object]) -> str:
        return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(headers), line(["---"] * len(headers)), *(line(row) for row in rows)])
