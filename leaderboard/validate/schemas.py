"""The versioned JSON Schemas of submissions and their metadata, and the metadata checks."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from dialfork_dataset.jsonl import json_error_text
from dialfork_metrics.task3.rows import (
    describe,
    shorten,
)

from .lines import _decoder, _describe, _short
from .report import SCHEMA_DIR, SCHEMA_FILES, Problem

# --------------------------------------------------------------------------- schemas


@cache
def load_schema(name: str) -> dict[str, Any]:
    """One of the versioned JSON Schemas shipped in ``leaderboard/schema`` (``detector``,
    ``metric``, ``metadata``, ``result``).

    Args:
        name: ``"detector"``, ``"metric"``, ``"metadata"`` or ``"result"``.

    Returns:
        The schema as a dict (read once, then cached: do not modify it).

    Raises:
        ValueError: ``name`` is not one of the four.
    """
    try:
        fname = SCHEMA_FILES[name]
    except KeyError:
        raise ValueError(f"unknown schema {name!r}; choose one of {sorted(SCHEMA_FILES)}") from None
    with open(SCHEMA_DIR / fname, encoding="utf-8") as fh:
        return json.load(fh)


@cache
def strict_validator_class():
    """Draft 2020-12 validator whose ``integer`` and ``number`` types reject booleans and floats
    with a zero fraction (``3.0`` is not an integer here) and non-finite numbers, like the
    hand-written line checks.

    Its ``pattern`` keyword uses :func:`ecma_pattern` (``$`` anchors at the end of the string).

    Returns:
        A ``jsonschema`` validator class (cached), instantiated with a schema.
    """
    from jsonschema import Draft202012Validator, validators

    base = Draft202012Validator.TYPE_CHECKER

    def is_integer(_checker, x):
        return type(x) is int

    def is_number(_checker, x):
        return (type(x) is int) or (type(x) is float and math.isfinite(x))

    checker = base.redefine_many({"integer": is_integer, "number": is_number})

    def pattern(_validator, patrn, instance, _schema):
        if isinstance(instance, str) and not ecma_pattern(patrn).search(instance):
            from jsonschema import ValidationError

            yield ValidationError(f"{shorten(instance)!r} does not match {patrn!r}")

    return validators.extend(Draft202012Validator, validators={"pattern": pattern}, type_checker=checker)


@cache
def ecma_pattern(patrn: str) -> re.Pattern[str]:
    """A schema ``pattern`` compiled with its JSON Schema (ECMA-262) meaning of ``$``: the end
    of the string. Python's ``$`` also matches before a final newline, so ``"alice\\n"`` would
    pass ``^[a-z]+$``; the trailing anchor is compiled as ``\\Z`` instead (a full match).

    Args:
        patrn: The schema's regular expression.

    Returns:
        The compiled pattern (cached), searched with ``re.search`` as JSON Schema does.
    """
    if patrn.endswith("$") and not patrn.endswith("\\$"):
        patrn = patrn[:-1] + r"\Z"
    return re.compile(patrn)


def schema_validator(name: str):
    """A strict validator of one shipped schema.

    Args:
        name: ``"detector"``, ``"metric"``, ``"metadata"`` or ``"result"`` (see
            :func:`load_schema`).

    Returns:
        An instance of :func:`strict_validator_class` for that schema (``iter_errors``,
        ``validate``, ``is_valid``).

    Raises:
        ValueError: ``name`` is unknown.
    """
    return strict_validator_class()(load_schema(name))


def private_metadata_fields() -> frozenset[str]:
    """Metadata fields marked ``"x-private": true`` in the schema (never published).

    Returns:
        The names of those fields (e.g. a contact e-mail).
    """
    props = load_schema("metadata")["properties"]
    return frozenset(k for k, v in props.items() if v.get("x-private"))


def public_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata without its private fields (what a published result shows).

    Args:
        metadata: A metadata object.

    Returns:
        A new dict with every field but those of :func:`private_metadata_fields`.
    """
    private = private_metadata_fields()
    return {k: v for k, v in metadata.items() if k not in private}


# --------------------------------------------------------------------------- metadata


#: Size cap of a metadata file (a metadata object is well under 2 KB).
MAX_METADATA_BYTES = 64 * 1024


def load_metadata(path: str | os.PathLike) -> tuple[dict[str, Any] | None, list[Problem]]:
    """Read a submission's metadata file, reporting problems instead of raising.

    Only the file is checked here (present, at most :data:`MAX_METADATA_BYTES`, UTF-8 without
    byte-order mark, valid JSON); :func:`metadata_problems` checks the object.

    Args:
        path: The metadata JSON file.

    Returns:
        ``(metadata, [])`` with the parsed JSON value (not necessarily an object), or
        ``(None, [problem])`` with a :class:`Problem` saying what is wrong with the file.
    """
    path = Path(path)
    if not path.is_file():
        return None, [
            Problem(
                "metadata_missing",
                f"metadata file {path} not found; write it (see leaderboard/schema/metadata.v1.json) "
                "or pass --metadata PATH",
                file=str(path),
            )
        ]
    size = path.stat().st_size
    if size > MAX_METADATA_BYTES:
        return None, [
            Problem(
                "metadata_too_large",
                f"metadata file is {size:,} bytes, over the "
                f"{MAX_METADATA_BYTES:,}-byte cap; it holds one small object",
                file=str(path),
            )
        ]
    try:
        raw = path.read_bytes()
        if raw.startswith(b"\xef\xbb\xbf"):
            return None, [
                Problem(
                    "bom",
                    "metadata file starts with a byte-order mark; save it as UTF-8 without BOM",
                    file=str(path),
                )
            ]
        obj = _decoder.decode(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        return None, [Problem("not_utf8", f"metadata is not valid UTF-8 ({e.reason})", file=str(path))]
    except json.JSONDecodeError as e:
        return None, [
            Problem(
                "metadata_not_json",
                f"metadata is not valid JSON ({json_error_text(e, line=True)})",
                line=e.lineno,
                file=str(path),
            )
        ]
    except RecursionError:
        return None, [
            Problem(
                "metadata_not_json",
                "metadata nests arrays or objects too deeply to read; it is one flat object",
                file=str(path),
            )
        ]
    return obj, []


_TYPE_WORDS = {
    "string": "a string",
    "boolean": "true or false",
    "null": "null",
    "integer": "an integer",
    "number": "a number",
    "object": "an object",
    "array": "an array",
}


def _type_words(t: Any) -> str:
    ts = t if isinstance(t, list) else [t]
    return " or ".join(_TYPE_WORDS.get(x, str(x)) for x in ts)


def _plain_message(err: Any, props: Mapping[str, Any]) -> tuple[str | None, str]:
    """``(field, message)`` in plain words for one ``jsonschema`` error of the metadata object
    (never jsonschema's own text; never the value of a private field)."""
    path = list(err.absolute_path)
    where = ".".join(str(p) for p in path) or None
    spec = props.get(path[0], {}) if path else {}
    private = bool(spec.get("x-private"))
    got = "" if private else f"; got {describe(err.instance)}"
    hint = spec.get("x-hint")
    kind = err.validator
    if kind == "required":
        missing = [f for f in err.validator_value if isinstance(err.instance, dict) and f not in err.instance]
        f = missing[0] if missing else None
        what = props.get(f, {}).get("description") if f else None
        return f, f"missing field {f!r}" + (f" ({what})" if what else "")
    if kind == "additionalProperties":
        extra = sorted(k for k in err.instance if k not in props) if isinstance(err.instance, dict) else []
        shown = ", ".join(repr(shorten(str(k), 40)) for k in extra[:10])
        return None, f"unknown field(s) {shown}; allowed fields: {', '.join(sorted(props))}"
    if kind == "type":
        return where, f"{where} must be {_type_words(err.validator_value)}{got}"
    if kind == "enum":
        return where, f"{where} must be one of {', '.join(map(str, err.validator_value))}{got}"
    if kind == "const":
        return where, f"{where} must be {json.dumps(err.validator_value)}{got}"
    if kind == "maxLength" and isinstance(err.instance, str):
        return (
            where,
            f"{where} is {len(err.instance):,} characters long; at most {err.validator_value} are allowed",
        )
    if kind in ("pattern", "minLength", "format") and hint:
        return where, f"{where} must be {hint}{got}"
    return where, f"{where or 'metadata'} is not valid ({kind}){'' if private else got}"


def metadata_problems(metadata: Any, track: str, source: str | None = None) -> list[Problem]:
    """Every problem of the metadata object against ``metadata.v1.json`` and the track, in plain
    words (each message names the field, what it must be and what was given, except for private
    fields, whose values are never echoed).

    Args:
        metadata: The parsed metadata (any JSON value; a non-object is one problem).
        track: The track the submission is validated as; a different ``track`` field in the
            metadata is a problem, and a missing one is taken as this track.
        source: The metadata file's name, put in each problem's ``file``; may be None.

    Returns:
        Every problem found (``code`` ``"metadata_invalid"``), sorted by field; empty when the
        metadata is valid.
    """
    if not isinstance(metadata, dict):
        return [
            Problem(
                "metadata_invalid", f"metadata must be a JSON object, got {_describe(metadata)}", file=source
            )
        ]
    probs: list[Problem] = []
    if "track" in metadata and metadata["track"] != track:
        probs.append(
            Problem(
                "metadata_invalid",
                f"metadata says track {_short(str(metadata['track']), 20)!r} but the "
                f"submission is validated as {track!r}; fix one of them",
                field="track",
                file=source,
            )
        )
    md = dict(metadata)
    md.setdefault("track", track)
    v = schema_validator("metadata")
    props = load_schema("metadata")["properties"]
    seen: set[tuple[str | None, str]] = set()
    for err in sorted(v.iter_errors(md), key=lambda e: [str(p) for p in e.absolute_path]):
        where, msg = _plain_message(err, props)
        if (where, msg) not in seen:  # e.g. minLength and pattern of the same field say the same thing
            seen.add((where, msg))
            probs.append(Problem("metadata_invalid", f"metadata: {msg}", field=where, file=source))
    return probs


def default_metadata_path(submission: str | os.PathLike) -> Path:
    """``preds.jsonl`` -> ``preds.metadata.json`` (same folder).

    Args:
        submission: The submission file's path.

    Returns:
        The default metadata path: the name without ``.jsonl`` (or without its last suffix)
        plus ``.metadata.json``, in the same folder.
    """
    p = Path(submission)
    stem = p.name[: -len(".jsonl")] if p.name.endswith(".jsonl") else p.stem
    return p.with_name(f"{stem}.metadata.json")
