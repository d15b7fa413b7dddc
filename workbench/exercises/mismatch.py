"""What every exercise check raises: where a learner's function parts from the reference, with a hint."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from workbench.exercises.waiting import YourTurn


class ExerciseMismatch(AssertionError):
    """A learner's function does not do what the reference does; the message says where and hints why.

    An AssertionError, so a notebook cell shows it as a failed check, and a test can catch it.

    Example:
        >>> from workbench.exercises import check_lr_schedule
        >>> def constant(step, *, lr, warmup_steps, total_steps, floor=0.0):
        ...     return lr  # no warm-up, no decay
        >>> try:
        ...     check_lr_schedule(constant)
        ... except ExerciseMismatch as mismatch:
        ...     print(type(mismatch).__name__, isinstance(mismatch, AssertionError))
        ExerciseMismatch True
    """


@contextlib.contextmanager
def learners_code(call: str, hint: str, where: str = "") -> Iterator[None]:
    """Around `call`, a call of the learner's function: a stub's `YourTurn` passes through (the check then
    says "not attempted yet"); any other error becomes an `ExerciseMismatch` naming it, in the learner's terms
    (`where`: what the call was given), with the `hint`.

    Example:
        >>> try:
        ...     with learners_code("f(0)", "x may be 0"):
        ...         1 / 0
        ... except ExerciseMismatch as mismatch:
        ...     print(mismatch)
        f(0) raised ZeroDivisionError: division by zero. Hint: x may be 0
    """
    try:
        yield
    except YourTurn:
        raise
    except Exception as error:
        raise ExerciseMismatch(
            f"{call} raised {type(error).__name__}: {error}{where}. Hint: {hint}"
        ) from error
