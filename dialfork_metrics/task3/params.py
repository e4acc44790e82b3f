"""One constraint table per detector, checked by one helper (scikit-learn's parameter validation,
which is private in scikit-learn, written small for the Task 3 detectors).

A detector's class holds ``_CONSTRAINTS: dict[str, Constraint]`` (parameter name -> what it must
be); ``fit`` calls :func:`validate_params` on its constructor parameters, which lists every bad one
in a single ``ValueError``. The constructors only store their parameters (scikit-learn's
convention), so a parameter changed with :meth:`set_params` or by assignment is checked too.

Example:
    >>> table = {"k": integer(1), "rule": one_of(("a", "b"))}
    >>> validate_params("Demo", {"k": 2, "rule": "a"}, table)
    >>> validate_params("Demo", {"k": 0, "rule": "c"}, table)
    Traceback (most recent call last):
    ...
    ValueError: Demo: k must be an integer >= 1, got 0; rule must be one of ('a', 'b'), got 'c'
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

__all__ = ["Constraint", "validate_params", "integer", "number", "one_of", "boolean", "interval", "either"]


class Constraint(NamedTuple):
    """What one parameter must be.

    Attributes:
        check: Returns True for a valid value.
        expected: The rule in words, for the error (``"an integer >= 1"``).
    """

    check: Callable[[Any], bool]
    expected: str


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def integer(minimum: int | None = None) -> Constraint:
    """An int (bools rejected), at least ``minimum`` when given.

    Args:
        minimum: The smallest valid value; None: any int.

    Returns:
        The constraint.
    """
    if minimum is None:
        return Constraint(lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool), "an integer")
    return Constraint(
        lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= minimum,
        f"an integer >= {minimum}",
    )


def interval(low: float | None, high: float | None, closed: str = "neither") -> Constraint:
    """A finite number (bools rejected) between ``low`` and ``high``.

    Args:
        low: The lower bound; None: unbounded below.
        high: The upper bound; None: unbounded above.
        closed: Which bounds are included: ``"neither"``, ``"left"``, ``"right"`` or ``"both"``.

    Returns:
        The constraint; its ``expected`` reads like ``"in (0, 1)"`` or ``">= 0"``.

    Raises:
        ValueError: ``closed`` is not one of the four words.
    """
    if closed not in ("neither", "left", "right", "both"):
        raise ValueError(f"closed must be 'neither', 'left', 'right' or 'both', got {closed!r}")
    lo_in, hi_in = closed in ("left", "both"), closed in ("right", "both")

    def check(v: Any) -> bool:
        if not _is_number(v):
            return False
        if low is not None and (v < low or (v == low and not lo_in)):
            return False
        return not (high is not None and (v > high or (v == high and not hi_in)))

    if low is None and high is None:
        words = "a finite number"
    elif high is None:
        words = f"{'>=' if lo_in else '>'} {low}"
    elif low is None:
        words = f"{'<=' if hi_in else '<'} {high}"
    else:
        words = f"in {'[' if lo_in else '('}{low}, {high}{']' if hi_in else ')'}"
    return Constraint(check, words)


def number() -> Constraint:
    """Any finite number (bools rejected).

    Returns:
        The constraint.
    """
    return interval(None, None)


def one_of(options: tuple[Any, ...]) -> Constraint:
    """One of a fixed set of values.

    Args:
        options: The valid values.

    Returns:
        The constraint.
    """
    return Constraint(
        lambda v: any(v == o and type(v) is type(o) for o in options), f"one of {tuple(options)}"
    )


def boolean() -> Constraint:
    """A bool.

    Returns:
        The constraint.
    """
    return Constraint(lambda v: isinstance(v, bool), "a bool")


def either(*constraints: Constraint) -> Constraint:
    """A value that meets any of ``constraints``.

    Args:
        *constraints: The alternatives.

    Returns:
        The constraint; its ``expected`` joins theirs with ``"or"``.
    """
    return Constraint(
        lambda v: any(c.check(v) for c in constraints), " or ".join(c.expected for c in constraints)
    )


def validate_params(owner: str, params: Mapping[str, Any], constraints: Mapping[str, Constraint]) -> None:
    """Check ``params`` against a constraint table; every bad parameter is named in one error.

    Args:
        owner: The class the parameters belong to, which starts the message.
        params: Parameter name -> value; names missing from the table are not checked.
        constraints: Parameter name -> :class:`Constraint`.

    Raises:
        ValueError: ``"<owner>: <name> must be <expected>, got <value>; ..."`` for each bad value.
    """
    errs = [
        f"{k} must be {c.expected}, got {params[k]!r}"
        for k, c in constraints.items()
        if k in params and not c.check(params[k])
    ]
    if errs:
        raise ValueError(f"{owner}: " + "; ".join(errs))
