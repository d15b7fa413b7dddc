"""Argument checks that raise ValueError naming the field and what it accepts (TypeError for a class given
where an instance belongs)."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import math
from collections.abc import Iterable, Mapping
from typing import Any


def check_choice(
    field: str, value: object, allowed: Iterable[object], meant: Mapping[object, object] | None = None
) -> None:
    """Raise ValueError unless `value` is one of `allowed`; `meant` maps other libraries' names for a value
    (Lightning's ``"bf16-mixed"``) to the allowed one the message then says to write."""
    allowed = list(allowed)
    if value not in allowed:
        names = ", ".join(repr(a) for a in allowed)
        said = f"{field}={value!r} is not supported; allowed values: {names}"
        if meant is not None and isinstance(value, str | int) and value in meant:
            said += f"; for {value!r} write {field}={meant[value]!r}"
        raise ValueError(said)


BUILD_THE_MODEL = "build the model first: {name}(...)"  # `refuse_class`'s fix for a model's class


def refuse_class(argument: str, value: object, instead: str) -> None:
    """TypeError when `value` is a class where an instance belongs: "`argument` is the class Name; " and
    `instead`, the fix, in which ``{name}`` stands for the class's name.

    Example:
        >>> refuse_class("loss_fn", dict, "give an instance, loss_fn={name}()")
        Traceback (most recent call last):
        ...
        TypeError: loss_fn is the class dict; give an instance, loss_fn=dict()
    """
    if isinstance(value, type):
        raise TypeError(f"{argument} is the class {value.__name__}; " + instead.format(name=value.__name__))


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


def check_number(
    name: str,
    value: object,
    *,
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
) -> None:
    """Raise ValueError unless `value` is a finite number within the bounds given, naming them."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and at_most is not None:
        ok = value <= at_most
    if ok and above is not None:
        ok = value > above
    if ok and at_least is not None:
        ok = value >= at_least
    if ok and below is not None:
        ok = value < below
    if not ok:
        bounds = []
        if above is not None:
            bounds.append(f"> {above:g}")
        if at_least is not None:
            bounds.append(f"≥ {at_least:g}")
        if below is not None:
            bounds.append(f"< {below:g}")
        if at_most is not None:
            bounds.append(f"≤ {at_most:g}")
        raise ValueError(f"{name} must be a finite number {' and '.join(bounds)}, got {value!r}")


def check_positive(field: str, value: object) -> float:
    """Return `value` as float if it is a finite number > 0, else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{field} must be a finite number > 0, got {value!r}")
    return float(value)


def naming_unknown_arguments(
    kind: type, elsewhere: Mapping[str, type] | None = None, aliases: Mapping[str, str] | None = None
) -> None:
    """Make dataclass `kind`'s ``__init__`` refuse a keyword it lacks with a TypeError that says what was
    meant instead of Python's "unexpected keyword argument": the field an alias names (`aliases`, e.g. a
    peer library's ``learning_rate`` for ``lr``), the config that holds it (`elsewhere` maps the field that
    holds another config to that config's class; "" for a config that holds `kind`), or the closest field."""
    init = kind.__init__
    fields = {field.name for field in dataclasses.fields(kind)}

    @functools.wraps(init)
    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        unknown = [name for name in kwargs if name not in fields]
        if unknown:
            name = unknown[0]
            raise TypeError(_unknown_argument(kind, name, kwargs[name], elsewhere or {}, aliases or {}))
        init(self, *args, **kwargs)

    kind.__init__ = __init__  # type: ignore[misc]


def _unknown_argument(
    kind: type, name: str, value: object, elsewhere: Mapping[str, type], aliases: Mapping[str, str]
) -> str:
    said = f"{kind.__name__}() takes no argument {name}"
    meant = aliases.get(name, name)
    fields = [field.name for field in dataclasses.fields(kind)]
    if meant in fields:
        return f"{said}; write {meant}={value!r}"
    for holder, other in elsewhere.items():
        if meant in {field.name for field in dataclasses.fields(other)}:
            lives = (
                f"{name} is {other.__name__}'s {meant}" if meant != name else f"{name} is in {other.__name__}"
            )
            if holder:
                return f"{said}: {lives}; write {holder}={other.__name__}({meant}={value!r})"
            return f"{said}: {lives}; write {other.__name__}({meant}={value!r}, ...)"
    close = difflib.get_close_matches(name, fields, n=1, cutoff=0.6)
    guess = f"; did you mean {close[0]}=?" if close else ""
    return f"{said}{guess}; it takes {', '.join(fields)}"


def check_called_as(name: str, function: Any, call: str, fix: str) -> None:
    """TypeError when `function` (given as `name`) cannot take the two arguments it is called with, `call`
    (e.g. ``"factory(optimizer, plan)"``), naming its own signature; `fix` says what to give instead."""
    try:
        inspect.signature(function).bind(None, None)
    except TypeError:
        shown = f"{getattr(function, '__name__', 'it')}{inspect.signature(function)}"
        raise TypeError(
            f"{name} is called as {call}, but {shown} does not take those two arguments; {fix}"
        ) from None
    except ValueError:  # a builtin without a signature: called as it is
        pass
