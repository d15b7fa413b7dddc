"""Argument checks that raise ValueError naming the field and what it accepts."""

from __future__ import annotations

import math
from collections.abc import Iterable


def check_choice(field: str, value: object, allowed: Iterable[object]) -> None:
    """Raise ValueError unless `value` is one of `allowed`."""
    allowed = list(allowed)
    if value not in allowed:
        names = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{field}={value!r} is not supported; allowed values: {names}")


def check_int(field: str, value: object, *, minimum: int, maximum: int | None = None) -> int:
    """Return `value` if it is an int ≥ `minimum` (and ≤ `maximum`), else raise ValueError."""
    rule = f"≥ {minimum}" if maximum is None else f"in {minimum}..{maximum:,}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field} must be an integer {rule}, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        raise ValueError(f"{field} must be an integer {rule}, got {value}")
    return value


def check_nonnegative(field: str, value: object, *, finite: bool = False) -> float:
    """Return ``value`` as float if it is a number ≥ 0 (and not inf when `finite`), else raise ValueError."""
    bad = isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0
    if bad or (finite and value == math.inf):
        raise ValueError(f"{field} must be a {'finite ' if finite else ''}number ≥ 0, got {value!r}")
    return float(value)


def check_positive(field: str, value: object) -> float:
    """Return `value` as float if it is a finite number > 0, else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{field} must be a finite number > 0, got {value!r}")
    return float(value)
