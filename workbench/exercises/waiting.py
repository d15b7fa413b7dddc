"""Exercises that wait for the learner: a stub that is not written yet, and checks that say so.

A tutorial's exercise is three cells: the learner's stub (its body calls `your_turn`), one answer in a
collapsed ``%%answer`` cell that Run All does not run (`workbench.exercises.cells`), and the check. A check
given a stub returns "not attempted yet" instead of failing, so Run All goes on; cells that build on the
learner's function start with ``%%when_written name`` and wait the same way. CI runs the answers
(``WORKBENCH_ANSWERS=1``), so every check is also run against a reference answer there.

    >>> def sgd_step(p, g, state, *, lr):
    ...     your_turn()
    >>> is_stub(sgd_step)
    True
    >>> @waits_for_learner
    ... def check(step):
    ...     return "matches"
    >>> print(check(sgd_step))  # doctest: +ELLIPSIS
    not attempted yet: sgd_step still calls your_turn(); write it in the cell above, then run this cell ...
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn, TypeVar

ANSWERS_ENV = "WORKBENCH_ANSWERS"  # "1": %%answer cells run (CI checks the references)

Check = TypeVar("Check", bound=Callable[..., Any])


class YourTurn(NotImplementedError):
    """Raised by a stub the learner has not written yet."""


def your_turn() -> NoReturn:
    """The body of an exercise's stub: replace this call with your code."""
    name = sys._getframe(1).f_code.co_name
    raise YourTurn(f"{name} is yours to write: replace its your_turn() line, then run the check below it")


def is_stub(value: Any) -> bool:
    """Whether `value` is a function (or a numba kernel) whose body still calls `your_turn`, or a class (or
    an instance of one) with such a method."""
    function = getattr(value, "py_func", value)  # a numba kernel keeps the Python function it compiles
    code = getattr(function, "__code__", None)
    if code is not None:
        return "your_turn" in code.co_names
    kind = value if isinstance(value, type) else type(value)
    if kind.__module__ == "builtins":
        return False
    return any(is_stub(member) for member in vars(kind).values() if hasattr(member, "__code__"))


def stub_names(values: Iterable[Any]) -> list[str]:
    """The names of the stubs among `values` (and one level into lists, tuples and dicts of them)."""
    found: list[str] = []
    for value in values:
        inner = (
            value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
        )
        for candidate in (value, *inner):
            if is_stub(candidate):
                found.append(getattr(candidate, "__name__", type(candidate).__name__))
    return list(dict.fromkeys(found))


def not_attempted(names: Iterable[str]) -> str:
    """The line a check returns for stubs: what to write, and where the answer is."""
    names = list(names)
    them = "them" if len(names) > 1 else "it"
    call = "call" if len(names) > 1 else "calls"
    return (
        f"not attempted yet: {', '.join(names)} still {call} your_turn(); write {them} in the cell above, "
        "then run this cell again (one answer is in the collapsed %%answer cell between them)"
    )


def waits_for_learner(check: Check) -> Check:
    """A check that returns `not_attempted` for a stub among its arguments (or one it calls) instead of
    checking it."""

    @functools.wraps(check)
    def waiting(*args: Any, **kwargs: Any) -> Any:
        stubs = stub_names([*args, *kwargs.values()])
        if stubs:
            return not_attempted(stubs)
        try:
            return check(*args, **kwargs)
        except YourTurn as stub:  # the learner's function calls a stub of theirs
            return not_attempted([str(stub).split(" ", 1)[0]])

    return waiting  # type: ignore[return-value]
