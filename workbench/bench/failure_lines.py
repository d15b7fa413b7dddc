"""A failed test, as pytest's JUnit XML gives it, in one line for the GPU report: an assertion's message,
the exception a child process's traceback ends with, or what nbval found wrong with a notebook cell."""

from __future__ import annotations

import re

ANSI = re.compile(r"(\x1b|#x1B)\[[0-9;]*m")  # colour codes; JUnit XML spells the escape "#x1B"
EXCEPTION = re.compile(r"^(E\s+)?[\w.]+(Error|Exception|Warning)\b")
WARNING_OR_ERROR = re.compile(r"\b\w+(Warning|Error|Exception): .*")  # "path:12: UserWarning: what"
STDERR_HEADING = "The cell's stderr:"  # what workbench.bench.nbval_stderr (a pytest plugin) adds it under


def failure_line(message: str, text: str) -> str:
    """What a failed test says, in one line: its message's first line, or where that only starts a child
    process's traceback, the last exception line of the failure's text; a notebook cell (nbval) says which
    cell, what differed and the last line it printed on stderr.

    Example:
        >>> failure_line("AssertionError: Traceback (most recent call last):", "E   ValueError: no ptxas")
        'AssertionError: ValueError: no ptxas'
        >>> cell = "Cell 3: Cell outputs differ\\nInput:\\nprint(2)\\nTraceback:\\n mismatch 'stdout'\\n"
        >>> failure_line("Notebook cell execution failed", cell + "  - 2\\n  + 1\\n")
        "Cell 3: Cell outputs differ: mismatch 'stdout' (this run: 2; stored: 1)"
    """
    first = ANSI.sub("", message.splitlines()[0] if message else "")
    if first.startswith("Notebook cell execution failed"):
        return _notebook_line(ANSI.sub("", text))[:600]
    if "Traceback (most recent call last)" not in first:
        return first[:600]
    lines = [line.strip() for line in text.splitlines()]
    found = [line.removeprefix("E").strip() for line in lines if EXCEPTION.match(line)]
    return f"{first.split(':')[0]}: {found[-1] if found else 'see the log'}"[:600]


def _notebook_line(text: str) -> str:
    lines = [line.rstrip() for line in text.splitlines()]
    cell = next((line.strip() for line in lines if line.startswith("Cell ")), "a cell")
    body, _, stderr = "\n".join(lines).partition(STDERR_HEADING)
    _, _, traceback = body.partition("Traceback:")
    told = traceback.splitlines()
    parts = [line.strip() for line in told if EXCEPTION.match(line.strip())][-1:]
    parts += [line.strip() for line in told if "output fields" in line or "mismatch" in line][:1]
    ran = [line.strip()[2:] for line in told if line.startswith("  - ")][:2]
    stored = [line.strip()[2:] for line in told if line.startswith("  + ")][:2]
    if ran or stored:  # pytest's diff of reference == test: "-" lines are this run's, "+" the stored ones
        diff = f"(this run: {' / '.join(ran) or '-'}; stored: {' / '.join(stored) or '-'})"
        parts[-1:] = [" ".join([*parts[-1:], diff])]
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    named = [found.group(0) for line in said if (found := WARNING_OR_ERROR.search(line))]
    if said:  # a warning's last line is the source line that raised it: its message, where it has one
        parts.append(f"stderr: {(named or said)[-1]}")
    return f"{cell}: {'; '.join(parts)}" if parts else cell
