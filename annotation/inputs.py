"""What the annotation app accepts from a request, checked at the boundary: the errors it answers
with (:class:`AnnotationError` and its 404/409/422 kinds), integers and floats from form fields,
and JSON bodies of bounded depth."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any


class AnnotationError(Exception):
    """A request the study refuses; ``status`` is the HTTP status, ``message`` says why.

    The app answers it as a JSON error (or an HTML page) with that status.

    Args:
        message: What was wrong and how to fix it; shown to the user as is.
        status: The HTTP status of the answer; None keeps the class's own (400 here, 404 for
            :class:`NotFound`, 409 for :class:`Conflict`, 422 for :class:`Invalid`).
    """

    status = 400

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class NotFound(AnnotationError):
    """Something the request names does not exist (or is not visible to this user): HTTP 404.

    Args:
        message: What was wrong and how to fix it.
        status: The HTTP status; None keeps 404.
    """

    status = 404


class Conflict(AnnotationError):
    """The request clashes with the study's state (e.g. a step already answered, a name already taken): HTTP 409.

    Args:
        message: What was wrong and how to fix it.
        status: The HTTP status; None keeps 409.
    """

    status = 409


class Invalid(AnnotationError):
    """A field of the request is missing or out of range: HTTP 422.

    Args:
        message: What was wrong and how to fix it.
        status: The HTTP status; None keeps 422.
    """

    status = 422


#: Integers as the app accepts them in forms: ASCII digits, an optional sign, at most 18 digits
#: (no "²", no "--5", no 5000-digit strings).
_INT_RE = re.compile(r"[+-]?[0-9]{1,18}")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]{1,18}(?:\.[0-9]{0,18})?|\.[0-9]{1,18})")
#: Deepest JSON nesting accepted in a request body (answers are flat objects).
MAX_JSON_DEPTH = 8
_MISSING = object()


def _show(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def parse_int(
    v: Any, name: str, lo: int | None = None, hi: int | None = None, default: Any = _MISSING
) -> Any:
    """``v`` (a JSON number or a form string) as an int in ``[lo, hi]``, else :class:`Invalid`
    (422) saying what was wrong. ``None`` / ``""`` give ``default`` when one is given.

    Args:
        v: The value: an int, an integral float, or a string of an integer.
        name: The field's name, for the message.
        lo: Least allowed value (None: no bound).
        hi: Greatest allowed value (None: no bound).
        default: Returned for a missing value (None or ``""``); without it a missing value is
            refused.

    Returns:
        The integer, or ``default`` for a missing value.

    Raises:
        Invalid: The value is missing and has no default, is not an integer (booleans are not),
            or lies outside ``[lo, hi]``.
    """
    if v is None or v == "":
        if default is not _MISSING:
            return default
        raise Invalid(f"{name} is required")
    out: int | None = None
    if isinstance(v, bool):
        out = None
    elif isinstance(v, int):
        out = v
    elif isinstance(v, float):
        out = int(v) if math.isfinite(v) and v.is_integer() else None
    elif isinstance(v, str) and _INT_RE.fullmatch(v.strip()):
        out = int(v.strip())
    if out is None:
        raise Invalid(f"{name} must be an integer, got {_show(v)}")
    if (lo is not None and out < lo) or (hi is not None and out > hi):
        raise Invalid(f"{name} must be between {lo} and {hi}, got {_show(out)}")
    return out


def parse_float(v: Any, name: str, lo: float, hi: float, default: Any = _MISSING) -> Any:
    """``v`` as a finite float in ``[lo, hi]``, else :class:`Invalid` (422).

    Args:
        v: The value: a number or a string of a decimal number.
        name: The field's name, for the message.
        lo: Least allowed value.
        hi: Greatest allowed value.
        default: Returned for a missing value (None or ``""``); without it a missing value is
            refused.

    Returns:
        The float, or ``default`` for a missing value.

    Raises:
        Invalid: The value is missing and has no default, is not a finite number (booleans and
            numbers of magnitude 1e18 or more are not), or lies outside ``[lo, hi]``.
    """
    if v is None or v == "":
        if default is not _MISSING:
            return default
        raise Invalid(f"{name} is required")
    out: float | None = None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        out = float(v) if abs(v) < 1e18 else None
    elif isinstance(v, str) and _FLOAT_RE.fullmatch(v.strip()):
        out = float(v.strip())
    if out is None or not math.isfinite(out):
        raise Invalid(f"{name} must be a number, got {_show(v)}")
    if not lo <= out <= hi:
        raise Invalid(f"{name} must be between {lo} and {hi}, got {out}")
    return out


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > 18:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _json_constant(name: str):
    raise ValueError(f"{name} is not a number")


def _depth_ok(raw: bytes, limit: int) -> bool:
    """Whether the JSON text nests at most ``limit`` levels (brackets inside strings ignored)."""
    depth, in_str, esc = 0, False, False
    for b in raw:
        if in_str:
            if esc:
                esc = False
            elif b == 0x5C:
                esc = True
            elif b == 0x22:
                in_str = False
        elif b == 0x22:
            in_str = True
        elif b in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return False
        elif b in (0x5D, 0x7D):
            depth -= 1
    return True


def parse_json_body(raw: bytes) -> dict[str, Any]:
    """A request body that must be a flat JSON object, or :class:`Invalid` (422): malformed
    JSON, non-UTF-8, integers longer than 18 digits, NaN/Infinity, nesting deeper than
    :data:`MAX_JSON_DEPTH` (checked before parsing) are all refused.

    Args:
        raw: The request body's bytes.

    Returns:
        The parsed JSON object.

    Raises:
        Invalid: Any of the refusals above, or the JSON value is not an object.
    """
    if not _depth_ok(raw, MAX_JSON_DEPTH):
        raise Invalid(f"the body nests deeper than {MAX_JSON_DEPTH} levels; send a flat JSON object")
    try:
        data = json.loads(raw.decode("utf-8"), parse_int=_json_int, parse_constant=_json_constant)
    except UnicodeDecodeError:
        raise Invalid("the body is not valid JSON (not UTF-8)") from None
    except json.JSONDecodeError as e:
        raise Invalid(f"the body is not valid JSON ({e.msg} at character {e.pos})") from None
    except (ValueError, RecursionError) as e:
        raise Invalid(f"the body is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise Invalid("the body must be a JSON object")
    return data


def int_field(data: Mapping[str, Any], name: str) -> int | None:
    """An optional integer field of a parsed body: :func:`parse_int` in [-10**18, 10**18].

    Args:
        data: The parsed body.
        name: The field's name.

    Returns:
        The integer, or None when the field is missing, None or ``""``.

    Raises:
        Invalid: The field is not an integer or lies outside the range (from :func:`parse_int`).
    """
    return parse_int(data.get(name), name, -(10**18), 10**18, default=None)
