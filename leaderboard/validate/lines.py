"""Checks of one JSON line of a submission (shared value checks with ``dialfork_metrics.task3.rows``)."""

from __future__ import annotations

import math
from typing import Any

from dialfork_metrics.task3.rows import (
    DupKeys,
    NonFinite,
    check_prediction,
    describe,
    is_numeric_string,
    shorten,
    strict_json_decoder,
)

from .report import TRACK_FIELDS

# --------------------------------------------------------------------------- JSON helpers

# The value checks and the JSON markers are shared with the ``task3`` evaluate module
# (``dialfork_metrics.task3.rows``): the two never disagree on what a valid prediction is.
_NonFinite = NonFinite
_DupKeys = DupKeys
_describe = describe
_short = shorten
_decoder = strict_json_decoder()


# --------------------------------------------------------------------------- line checks


def _check_prediction(v: Any, T: int | None) -> str | None:
    """Error message for a Task 3 prediction value, or None if valid (``T`` None: id unknown)."""
    problem = check_prediction(v, T)
    return None if problem is None else problem[1]


def _check_confidence(v: Any) -> str | None:
    if v is None or (type(v) is int and abs(v) < 2**1023) or (type(v) is float and math.isfinite(v)):
        return None
    return f"confidence is {_describe(v)}; write a finite number or null (or leave the field out)"


def _check_distance(v: Any) -> str | None:
    if (type(v) is int and abs(v) < 2**1023) or (type(v) is float and math.isfinite(v)):
        return None
    if isinstance(v, str) and is_numeric_string(v):
        return f"distance is {_describe(v)}; write the number without quotes"
    return f"distance is {_describe(v)}; write a finite JSON number"


_ALLOWED = {
    "detector": (
        frozenset({"dialogue_id", "prediction"}),
        frozenset({"dialogue_id", "prediction", "confidence"}),
    ),
    "metric": (frozenset({"pair_id", "distance"}), frozenset({"pair_id", "distance"})),
}


def check_line_object(obj: Any, track: str, T: int | None = None) -> list[tuple[str, str, str | None]]:
    """Problems of one parsed line, as ``(code, message, field)``; empty when valid.

    Id membership and duplicates are file-level checks (see :func:`validate_submission`);
    ``T`` (the dialogue's number of system turns) enables the range check.

    Args:
        obj: The parsed JSON value of the line (parsed with the strict decoder, so that
            duplicate keys are visible).
        track: ``"detector"`` or ``"metric"``.
        T: The blind dialogue's number of system turns (a detector prediction must be in
            ``1..T`` or null); None skips the range check.

    Returns:
        One ``(code, message, field)`` per problem (``field`` None when no single field is at
        fault): ``not_an_object``, ``duplicate_key``, ``missing_field``, ``unknown_field``,
        ``bad_id``, or a value problem of the prediction, distance or confidence.
    """
    out: list[tuple[str, str, str | None]] = []
    if not isinstance(obj, dict):
        return [("not_an_object", f"expected a JSON object, got {_describe(obj)}", None)]
    required, allowed = _ALLOWED[track]
    id_field, value_field = TRACK_FIELDS[track]
    if isinstance(obj, _DupKeys):
        out.append(("duplicate_key", f"the object repeats the key(s) {obj.dup}; give each field once", None))
    missing = [f for f in (id_field, value_field) if f not in obj]
    for f in missing:
        hint = " (use null for 'no deviation')" if f == "prediction" else ""
        out.append(("missing_field", f"missing field {f!r}{hint}", f))
    unknown = sorted(set(obj) - allowed)
    if unknown:
        out.append(("unknown_field", f"unknown field(s) {unknown}; allowed: {sorted(allowed)}", unknown[0]))
    did = obj.get(id_field)
    if id_field in obj and not (isinstance(did, str) and did):
        out.append(("bad_id", f"{id_field} must be a non-empty string, got {_describe(did)}", id_field))
    if value_field in obj:
        if track == "detector":
            problem = check_prediction(obj[value_field], T)
            if problem:
                out.append((problem[0], problem[1], value_field))
        else:
            msg = _check_distance(obj[value_field])
            if msg:
                out.append(("bad_value", msg, value_field))
    if track == "detector" and "confidence" in obj:
        msg = _check_confidence(obj["confidence"])
        if msg:
            out.append(("bad_value", msg, "confidence"))
    return out
