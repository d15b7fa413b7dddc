"""A rank's traceback as the user reads it: from their own code on, in their own files.

A worker formats its error with `rank_traceback`, which leaves out the worker's own frames (how it called
the function is not the user's concern). cloudpickle sends a notebook's or script's functions by value and
names their file ``<dynamic-code>``, so the launcher puts the file and the source line back with
`with_source_files`, from the function it launched, what that function's module holds and what its closure
holds (line numbers travel unchanged).
"""

from __future__ import annotations

import linecache
import re
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_WORKER_FILE = str(Path(__file__).with_name("_worker.py"))
_DYNAMIC = re.compile(r'^  File "<dynamic-code>", line (?P<line>\d+), in (?P<name>\S+)$', re.M)


def rank_traceback(error: BaseException) -> str:
    """`error`'s traceback from the first frame that is not the worker's (only its last line when every
    frame is the worker's own, as for a result it could not send back).

    Example:
        >>> try:
        ...     int("x")
        ... except ValueError as error:
        ...     print(rank_traceback(error).splitlines()[-1])
        ValueError: invalid literal for int() with base 10: 'x'
    """
    frames = traceback.extract_tb(error.__traceback__)
    first = next((i for i, frame in enumerate(frames) if frame.filename != _WORKER_FILE), len(frames))
    shown = traceback.format_list(frames[first:])
    head = ["Traceback (most recent call last):\n"] if shown else []
    return "".join(head + shown + traceback.format_exception_only(type(error), error))


def with_source_files(text: str, fn: Callable[..., Any]) -> str:
    """`text` (a rank's traceback) with each ``File "<dynamic-code>", line N, in NAME`` frame given the file
    of the function NAME that `fn` can reach, and its source line; frames of other names are left as sent.

    Example:
        >>> def train(strategy):
        ...     return 1 / 0
        >>> sent = '  File "<dynamic-code>", line 2, in train'
        >>> print(with_source_files(sent, train).replace(train.__code__.co_filename, "FILE"))
          File "FILE", line 2, in train
            return 1 / 0
    """
    files: dict[str, str] = {}
    for code in _codes(fn):
        files.setdefault(code.co_name, code.co_filename)

    def restore(match: re.Match[str]) -> str:
        filename = files.get(match["name"])
        if filename is None:
            return match[0]
        source = linecache.getline(filename, int(match["line"])).strip()
        frame = f'  File "{filename}", line {match["line"]}, in {match["name"]}'
        return frame + (f"\n    {source}" if source else "")

    return _DYNAMIC.sub(restore, text)


def _codes(fn: Callable[..., Any]) -> Iterator[Any]:
    """The code objects of `fn`, of the functions and classes' methods in its module and its closure."""
    cells = [cell.cell_contents for cell in getattr(fn, "__closure__", None) or () if _filled(cell)]
    for value in (fn, *cells, *getattr(fn, "__globals__", {}).values()):
        members = vars(value).values() if isinstance(value, type) else (value,)
        for member in members:
            code = getattr(member, "__code__", None)
            if code is not None:
                yield code


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True
