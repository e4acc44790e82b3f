"""What a valid Task 3 prediction value is, and how an invalid one is described.

One definition for every entry point that takes predictions from users: the leaderboard's
line checks (``leaderboard.validate``) and the ``task3`` evaluate module both call
:func:`check_prediction`, so they accept exactly the same values and word their errors
identically. A prediction is a system turn index (an integer in ``1..T``) or ``None`` / JSON
``null`` for "no deviation"; booleans, floats (even ``3.0``), numeric strings, NaN and
Infinity are refused with a message that says how to write the value instead.

:func:`strict_json_decoder` is the JSON decoder the leaderboard reads submission lines with:
``NaN`` / ``Infinity`` come back as :class:`NonFinite` (Python's ``json`` accepts them, JSON
does not), integer literals longer than :data:`MAX_INT_DIGITS` as :class:`HugeInt` (never
converted: Python refuses int conversions of more than 4,300 digits, and no turn index or
distance needs more than a few), and objects with a repeated key as :class:`DupKeys`.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any

#: Integer literals with more digits than this are not converted (see :class:`HugeInt`).
MAX_INT_DIGITS = 30


class NonFinite:
    """Stands for NaN / Infinity / -Infinity, which Python's json accepts but JSON does not.

    Args:
        text: The literal as written (``"NaN"``, ``"Infinity"`` or ``"-Infinity"``).
    """

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


class HugeInt:
    """An integer literal of more than :data:`MAX_INT_DIGITS` digits, kept unconverted.

    Args:
        text: The literal's digits, with a leading ``-`` when negative.
    """

    __slots__ = ("digits", "negative")

    def __init__(self, text: str):
        self.negative = text.startswith("-")
        self.digits = len(text.lstrip("-"))

    def __repr__(self) -> str:
        return f"<{'-' if self.negative else ''}integer of {self.digits:,} digits>"


class DupKeys(dict):
    """A parsed object that had duplicate keys (``dup`` names them)."""

    dup: list[str]


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        dups = sorted({k for k, _ in pairs if k in seen or seen.add(k)})
        out = DupKeys(d)
        out.dup = dups
        return out
    return d


def _parse_int(text: str) -> int | HugeInt:
    return HugeInt(text) if len(text) > MAX_INT_DIGITS + text.startswith("-") else int(text)


def strict_json_decoder() -> json.JSONDecoder:
    """A ``json.JSONDecoder`` with the markers above. Its ``decode`` still raises
    ``json.JSONDecodeError`` for bad syntax and ``RecursionError`` for absurd nesting: callers
    turn both into a problem on that line.

    Returns:
        The decoder (NaN/Infinity as :class:`NonFinite`, long integers as :class:`HugeInt`,
        objects with a repeated key as :class:`DupKeys`).
    """
    return json.JSONDecoder(object_pairs_hook=_pairs_hook, parse_constant=NonFinite, parse_int=_parse_int)


def shorten(s: str, n: int = 40) -> str:
    """``s`` cut to ``n`` characters (with ``...``): ids and values quoted in messages stay short.

    Args:
        s: The text.
        n: The most characters kept, ``...`` included.

    Returns:
        ``s`` itself when short enough, else its first ``n - 3`` characters and ``...``.
    """
    return s if len(s) <= n else s[: n - 3] + "..."


def is_bool(v: Any) -> bool:
    """Whether ``v`` is a boolean (``bool`` or a numpy ``bool_``).

    Args:
        v: Any value.

    Returns:
        True for a boolean.
    """
    return isinstance(v, bool) or getattr(getattr(v, "dtype", None), "kind", None) == "b"  # numpy bool_


def is_int(v: Any) -> bool:
    """An integer (``int`` or a numpy integer), never a boolean.

    Args:
        v: Any value.

    Returns:
        True for an integer.
    """
    return isinstance(v, numbers.Integral) and not is_bool(v)


def describe(v: Any) -> str:
    """A short description of a value for an error message (never the whole of a long value).

    Args:
        v: Any value read from a submission.

    Returns:
        Words such as ``"a float (3.0)"``, ``"null"`` or ``"an array"``.
    """
    if is_bool(v):
        return f"a boolean ({json.dumps(bool(v))})"
    if isinstance(v, NonFinite):
        return f"{v.text}, which is not valid JSON"
    if isinstance(v, HugeInt):
        return f"an integer of {v.digits:,} digits"
    if isinstance(v, float):
        return f"a float ({v!r})"
    if isinstance(v, str):
        return f"a string ({json.dumps(shorten(v, 30), ensure_ascii=False)})"
    if v is None:
        return "null"
    if is_int(v):
        text = _int_text(int(v))
        return text[1:-1] if text.startswith("(") else f"an integer ({text})"
    if isinstance(v, list | tuple):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _int_text(n: int) -> str:
    """``n`` in digits, or its approximate length when too long to quote (or to convert)."""
    if n.bit_length() < 100:
        return str(n)
    return f"({'-' if n < 0 else ''}an integer of about {int(n.bit_length() * math.log10(2)) + 1:,} digits)"


def is_numeric_string(s: str) -> bool:
    """Whether ``s`` parses as a float (a number sent as a string: reported as such).

    Args:
        s: The string.

    Returns:
        True when ``float(s)`` succeeds.
    """
    try:
        float(s)
    except ValueError:
        return False
    return True


def check_prediction(v: Any, T: int | None = None) -> tuple[str, str] | None:
    """``(code, message)`` for an invalid Task 3 prediction value, None when it is valid.

    Args:
        v: The prediction: a system turn index or None.
        T: The dialogue's number of system turns (``None`` when unknown: no upper bound).

    Returns:
        None for a valid value, else ``(code, message)``: code ``out_of_range`` (an integer outside
        ``1..T``, including ``-1`` and ``0``) or ``bad_value`` (anything that is not an integer or
        None); the message says how to write the value instead.
    """
    if v is None:
        return None
    if is_int(v):
        v = int(v)
        if v == -1:
            return "out_of_range", "prediction is -1; write null for 'no deviation' (never -1)"
        if v < 1:
            return (
                "out_of_range",
                f"prediction {_int_text(v)} is not a system turn index; indices start at 1 (null = no deviation)",
            )
        if T is not None and v > T:
            return (
                "out_of_range",
                f"prediction {_int_text(v)} outside 1..T (T={T} system turns in this dialogue)",
            )
        return None
    if isinstance(v, HugeInt):
        where = "indices start at 1" if v.negative else "far above any dialogue's number of system turns"
        return "out_of_range", f"prediction is {describe(v)}; {where} (write a system turn index or null)"
    if is_bool(v) or isinstance(v, NonFinite):
        return "bad_value", f"prediction is {describe(v)}; write an integer system turn index or null"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "bad_value", f"prediction is {describe(v)}; write an integer system turn index or null"
        hint = f"write {int(v)}" if v.is_integer() else "round it to a system turn index"
        return "bad_value", f"prediction is {describe(v)}; turn indices are JSON integers ({hint})"
    if isinstance(v, str):
        if v.strip().lower() in ("null", "none", ""):
            return "bad_value", f"prediction is {describe(v)}; write null without quotes for 'no deviation'"
        if is_numeric_string(v):
            return "bad_value", f"prediction is {describe(v)}; write the number without quotes"
    return "bad_value", f"prediction is {describe(v)}; write an integer system turn index or null"


def check_predictions(values: list[Any], turns: list[Any] | None = None, start: int = 0) -> list[str]:
    """Messages ``"row i: ..."`` for every invalid value of a list of predictions, in the words of
    :func:`check_prediction`. Used by the ``task3`` evaluate module before evaluate casts the
    column (which would turn ``3.0`` or ``True`` into an integer).

    Args:
        values: The predictions.
        turns: Each row's ``T`` (number of system turns) or None; None: no upper bound.
        start: The number of the first row in the messages.

    Returns:
        One message per invalid value, in row order (empty when all are valid).
    """
    out = []
    for i, v in enumerate(values):
        T = turns[i] if turns is not None and i < len(turns) else None
        T = int(T) if is_int(T) else None
        problem = check_prediction(v, T)
        if problem is not None:
            out.append(f"row {start + i}: {problem[1]}")
    return out


__all__ = [
    "MAX_INT_DIGITS",
    "DupKeys",
    "HugeInt",
    "NonFinite",
    "check_prediction",
    "check_predictions",
    "describe",
    "is_bool",
    "is_int",
    "shorten",
    "strict_json_decoder",
]
