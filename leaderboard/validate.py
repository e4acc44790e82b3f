"""Offline validation of a leaderboard submission FILE, before anything is scored or stored.

The checks are about the file a researcher uploads, and every problem is reported at once,
with its line number:

* the file itself: over the size cap (not read), empty, a byte-order mark, not UTF-8 (each
  bad line), a line that is not a JSON object, duplicate keys inside an object;
* the fields: missing or unknown fields (the versioned JSON Schemas in ``leaderboard/schema``),
  ``dialogue_id`` / ``pair_id`` not a non-empty string;
* the ids: duplicates (both line numbers named), ids not in the blind set, blind ids missing
  (their count and the first ones);
* the values: a prediction that is not an ``int`` or ``null`` (booleans, floats, numeric
  strings, NaN and Infinity are named as such; ``-1`` gets a hint to use ``null``), a turn
  index outside ``1..T`` (``T`` is the public number of system turns of that blind
  dialogue); a distance that is not a finite number;
* the metadata file: missing, not JSON, or invalid against ``metadata.v1.json``.

The per-line checks are written out by hand (not ``jsonschema`` per line) for two reasons:
speed (an 18,000-line file is checked in a few tens of milliseconds) and messages that say
what to fix (``"3"`` is a string, write the number without quotes). A test checks that the
hand-written checks accept exactly what the JSON Schema accepts. The metadata, one object, is
validated with ``jsonschema`` directly.

The validator never reads the gold: the blind set (ids and ``T``) is public.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from dialfork_metrics.task3.rows import (
    DupKeys,
    NonFinite,
    check_prediction,
    describe,
    shorten,
    strict_json_decoder,
)

#: Default cap on a submission's size (bytes). A full blind Task 3 submission (~18,000 lines)
#: is under 1.5 MB even with confidences; the cap protects the Space from huge uploads.
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
#: How many missing ids an error message names before summarising.
MISSING_IDS_SHOWN = 10
#: A report keeps the first this many problems and counts the others (``n_errors``).
MAX_REPORTED_ERRORS = 100
#: Longest accepted line (characters). A valid line is one short object (under 200 characters);
#: a longer one is reported with its line number and never parsed.
MAX_LINE_CHARS = 64 * 1024
TRACKS = ("detector", "metric")
REGIMES = ("streaming", "offline", "offline+workflow")
SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
SCHEMA_FILES = {
    "detector": "detector_submission.v1.json",
    "metric": "metric_submission.v1.json",
    "metadata": "metadata.v1.json",
    "result": "result.v1.json",
}
#: JSON field holding the id, and the value field, of each track's lines.
TRACK_FIELDS = {"detector": ("dialogue_id", "prediction"), "metric": ("pair_id", "distance")}


class SubmissionError(ValueError):
    """A submission failed validation; ``report`` is the full :class:`ValidationReport`."""

    def __init__(self, report: ValidationReport):
        self.report = report
        super().__init__(report.format_text(max_errors=20))


# --------------------------------------------------------------------------- schemas


@cache
def load_schema(name: str) -> dict[str, Any]:
    """One of the versioned JSON Schemas shipped in ``leaderboard/schema`` (``detector``,
    ``metric``, ``metadata``, ``result``)."""
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
    hand-written line checks."""
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
    pass ``^[a-z]+$``; the trailing anchor is compiled as ``\\Z`` instead (a full match)."""
    if patrn.endswith("$") and not patrn.endswith("\\$"):
        patrn = patrn[:-1] + r"\Z"
    return re.compile(patrn)


def schema_validator(name: str):
    return strict_validator_class()(load_schema(name))


def private_metadata_fields() -> frozenset[str]:
    """Metadata fields marked ``"x-private": true`` in the schema (never published)."""
    props = load_schema("metadata")["properties"]
    return frozenset(k for k, v in props.items() if v.get("x-private"))


def public_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    private = private_metadata_fields()
    return {k: v for k, v in metadata.items() if k not in private}


# --------------------------------------------------------------------------- blind set


@dataclass(frozen=True)
class BlindSet:
    """The public side of the blind test sets: ids and ``T`` (no labels).

    ``turns``: ``{blind dialogue_id: num_system_turns}``; ``pairs``: the Task 2 pair ids.
    """

    turns: Mapping[str, int]
    pairs: frozenset[str] = frozenset()
    source: str = ""

    @property
    def dialogue_ids(self) -> list[str]:
        return list(self.turns)

    def revision(self) -> str:
        """sha256 over the sorted (id, T) rows and pair ids: which blind set a result used."""
        h = hashlib.sha256()
        for did in sorted(self.turns):
            h.update(f"{did}\t{self.turns[did]}\n".encode())
        h.update(b"--\n")
        for pid in sorted(self.pairs):
            h.update(f"{pid}\n".encode())
        return h.hexdigest()

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]], pairs: Iterable[Mapping[str, Any] | str] = (),
                  source: str = "") -> BlindSet:
        turns = {str(r["dialogue_id"]): int(r["num_system_turns"]) for r in rows}
        pids = frozenset(p if isinstance(p, str) else str(p["pair_id"]) for p in pairs)
        return cls(turns=turns, pairs=pids, source=source)

    @classmethod
    def from_dir(cls, dest: str | os.PathLike) -> BlindSet:
        """Read the blind sets of a Hub layout written by ``dialfork_dataset.export_hub_layout``.

        Only the columns the validator needs are read (ids and ``num_system_turns``, not the
        transcripts), straight from the parquet shards of ``data/blind`` and
        ``data/blind_task2`` (the layout of ``dialfork_dataset.load_blind`` /
        ``load_blind_pairs``).
        """
        import pyarrow.parquet as pq

        dest = Path(dest)
        blind = dest / "data" / "blind"
        files = sorted(blind.glob("*.parquet"))
        if not files:
            raise FileNotFoundError(
                f"{blind}: no parquet files; --blind must be a DialFork Hub layout folder "
                "(written by `python -m dialfork_dataset export` / export_hub_layout) holding data/blind/"
            )
        turns: dict[str, int] = {}
        for f in files:
            t = pq.read_table(f, columns=["dialogue_id", "num_system_turns"])
            turns.update(zip(t.column("dialogue_id").to_pylist(), t.column("num_system_turns").to_pylist()))
        pids: list[str] = []
        for f in sorted((dest / "data" / "blind_task2").glob("*.parquet")):
            pids.extend(pq.read_table(f, columns=["pair_id"]).column("pair_id").to_pylist())
        return cls(turns=turns, pairs=frozenset(pids), source=str(dest))


# --------------------------------------------------------------------------- report


@dataclass
class Problem:
    """One problem: a machine-readable ``code``, a message saying what to fix, and where."""

    code: str
    message: str
    line: int | None = None
    other_line: int | None = None
    field: str | None = None
    file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("code", self.code), ("file", self.file), ("line", self.line),
                                  ("other_line", self.other_line), ("field", self.field),
                                  ("message", self.message)) if v is not None}

    def __str__(self) -> str:
        where = self.file or ""
        if self.line is not None:
            where = f"{where}:{self.line}" if where else f"line {self.line}"
        return f"{where}: {self.message}" if where else self.message


@dataclass
class ValidationReport:
    """Everything :func:`validate_submission` found. ``values`` (the parsed predictions or
    distances by id) and ``metadata`` are kept for scoring but not serialised by
    :meth:`to_dict` (metadata may hold private fields).

    ``errors`` holds at most :data:`MAX_REPORTED_ERRORS` problems, in file order;
    ``n_errors`` counts them all (``n_omitted`` = how many were counted but not kept)."""

    path: str
    track: str
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    sha256: str | None = None
    n_bytes: int | None = None
    values: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] | None = None
    n_omitted: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def n_errors(self) -> int:
        return len(self.errors) + self.n_omitted

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "file": self.path,
            "track": self.track,
            "sha256": self.sha256,
            "bytes": self.n_bytes,
            "n_errors": self.n_errors,
            "errors": [p.to_dict() for p in self.errors],
            "errors_omitted": self.n_omitted,
            "warnings": [p.to_dict() for p in self.warnings],
            "summary": self.summary,
        }

    def format_text(self, max_errors: int | None = None) -> str:
        lines: list[str] = []
        if self.ok:
            s = self.summary
            lines.append(f"{self.path}: valid {self.track} submission")
            for k, v in s.items():
                lines.append(f"  {k}: {v}")
        else:
            lines.append(f"{self.path}: {self.n_errors:,} error(s); nothing was scored or stored")
            shown = self.errors if max_errors is None else self.errors[:max_errors]
            lines.extend(f"  {p}" for p in shown)
            if len(shown) < self.n_errors:
                hint = " (use --json for the first " + str(len(self.errors)) + ")" if len(shown) < len(self.errors) else ""
                lines.append(f"  ... and {self.n_errors - len(shown):,} more{hint}")
        for w in self.warnings:
            lines.append(f"  warning: {w}")
        return "\n".join(lines)

    def cap_errors(self, limit: int | None = None) -> None:
        """Keep the first ``limit`` errors (default :data:`MAX_REPORTED_ERRORS`), count the rest."""
        limit = MAX_REPORTED_ERRORS if limit is None else limit
        if len(self.errors) > limit:
            self.n_omitted += len(self.errors) - limit
            del self.errors[limit:]

    def raise_for_errors(self) -> None:
        if self.errors:
            raise SubmissionError(self)


# --------------------------------------------------------------------------- JSON helpers

# The value checks and the JSON markers are shared with the ``task3`` evaluate module
# (``dialfork_metrics.task3.rows``): the two never disagree on what a valid prediction is.
_NonFinite = NonFinite
_DupKeys = DupKeys
_describe = describe
_short = shorten
_decoder = strict_json_decoder()


def _is_numeric_string(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


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
    if isinstance(v, str) and _is_numeric_string(v):
        return f"distance is {_describe(v)}; write the number without quotes"
    return f"distance is {_describe(v)}; write a finite JSON number"


_ALLOWED = {
    "detector": (frozenset({"dialogue_id", "prediction"}), frozenset({"dialogue_id", "prediction", "confidence"})),
    "metric": (frozenset({"pair_id", "distance"}), frozenset({"pair_id", "distance"})),
}


def check_line_object(obj: Any, track: str, T: int | None = None) -> list[tuple[str, str, str | None]]:
    """Problems of one parsed line, as ``(code, message, field)``; empty when valid.

    Id membership and duplicates are file-level checks (see :func:`validate_submission`);
    ``T`` (the dialogue's number of system turns) enables the range check.
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


# --------------------------------------------------------------------------- metadata


#: Size cap of a metadata file (a metadata object is well under 2 KB).
MAX_METADATA_BYTES = 64 * 1024


def load_metadata(path: str | os.PathLike) -> tuple[dict[str, Any] | None, list[Problem]]:
    path = Path(path)
    if not path.is_file():
        return None, [Problem("metadata_missing",
                              f"metadata file {path} not found; write it (see leaderboard/schema/metadata.v1.json) "
                              "or pass --metadata PATH", file=str(path))]
    size = path.stat().st_size
    if size > MAX_METADATA_BYTES:
        return None, [Problem("metadata_too_large", f"metadata file is {size:,} bytes, over the "
                                                    f"{MAX_METADATA_BYTES:,}-byte cap; it holds one small object",
                              file=str(path))]
    try:
        raw = path.read_bytes()
        if raw.startswith(b"\xef\xbb\xbf"):
            return None, [Problem("bom", "metadata file starts with a byte-order mark; save it as UTF-8 without BOM",
                                  file=str(path))]
        obj = _decoder.decode(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        return None, [Problem("not_utf8", f"metadata is not valid UTF-8 ({e.reason})", file=str(path))]
    except json.JSONDecodeError as e:
        return None, [Problem("metadata_not_json", f"metadata is not valid JSON ({e.msg} at line {e.lineno} "
                                                   f"column {e.colno})", line=e.lineno, file=str(path))]
    except RecursionError:
        return None, [Problem("metadata_not_json", "metadata nests arrays or objects too deeply to read; it is one "
                                                   "flat object", file=str(path))]
    return obj, []


_TYPE_WORDS = {"string": "a string", "boolean": "true or false", "null": "null", "integer": "an integer",
               "number": "a number", "object": "an object", "array": "an array"}


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
        return where, f"{where} is {len(err.instance):,} characters long; at most {err.validator_value} are allowed"
    if kind in ("pattern", "minLength", "format") and hint:
        return where, f"{where} must be {hint}{got}"
    return where, f"{where or 'metadata'} is not valid ({kind}){'' if private else got}"


def metadata_problems(metadata: Any, track: str, source: str | None = None) -> list[Problem]:
    """Every problem of the metadata object against ``metadata.v1.json`` and the track, in plain
    words (each message names the field, what it must be and what was given, except for private
    fields, whose values are never echoed)."""
    if not isinstance(metadata, dict):
        return [Problem("metadata_invalid", f"metadata must be a JSON object, got {_describe(metadata)}", file=source)]
    probs: list[Problem] = []
    if "track" in metadata and metadata["track"] != track:
        probs.append(Problem("metadata_invalid", f"metadata says track {_short(str(metadata['track']), 20)!r} but the "
                                                 f"submission is validated as {track!r}; fix one of them",
                             field="track", file=source))
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
    """``preds.jsonl`` -> ``preds.metadata.json`` (same folder)."""
    p = Path(submission)
    stem = p.name[: -len(".jsonl")] if p.name.endswith(".jsonl") else p.stem
    return p.with_name(f"{stem}.metadata.json")


# --------------------------------------------------------------------------- the file


def _first_long_line(path: Path, limit_bytes: int, max_line_chars: int, chunk: int = 1 << 20) -> int | None:
    """Line number of the first line longer than ``max_line_chars`` bytes within the first
    ``limit_bytes`` of an over-size file (read in chunks: memory stays bounded)."""
    line, length, read = 1, 0, 0
    with open(path, "rb") as fh:
        while read < limit_bytes:
            block = fh.read(min(chunk, limit_bytes - read))
            if not block:
                return None
            read += len(block)
            start = 0
            while True:
                nl = block.find(b"\n", start)
                length += (nl if nl >= 0 else len(block)) - start
                if length > max_line_chars:
                    return line
                if nl < 0:
                    break
                line, length, start = line + 1, 0, nl + 1
    return None


def _decode(data: bytes, path: str, errors: list[Problem]) -> list[str | None]:
    """Lines of ``data`` (None for a line that is not UTF-8, each reported)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        out: list[str | None] = []
        for i, raw in enumerate(data.split(b"\n"), 1):
            try:
                out.append(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                errors.append(Problem("not_utf8", f"not valid UTF-8 (byte {raw[e.start:e.start + 1]!r} at column "
                                                  f"{e.start + 1}); save the file as UTF-8", line=i, file=path))
                out.append(None)
        return out
    return text.split("\n")


def validate_submission(
    path: str | os.PathLike,
    track: str,
    blind: BlindSet,
    *,
    metadata: Mapping[str, Any] | str | os.PathLike | None = None,
    require_metadata: bool = True,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_line_chars: int = MAX_LINE_CHARS,
) -> ValidationReport:
    """Validate a submission file against the blind set; returns a report listing every problem.

    Never raises for a bad file; call ``ValidationReport.raise_for_errors`` to turn errors into a
    ``SubmissionError``. The report keeps the first ``MAX_REPORTED_ERRORS`` problems and counts the
    others.

    Args:
        path: The submission (JSON Lines, UTF-8 without BOM).
        track: ``"detector"`` (Task 3) or ``"metric"`` (Task 2).
        blind: The blind set's ids and T (``BlindSet.from_dir(hub_folder)``).
        metadata: A dict, a path to the metadata JSON, or None for the default path
            (``<name>.metadata.json`` next to the file).
        require_metadata: With False a missing metadata file is not an error (a ``validate`` run on
            predictions alone).
        max_bytes: Size cap, checked before reading.
        max_line_chars: Longest line parsed.

    Returns:
        A ``ValidationReport``: ``ok``, ``errors`` (code, line, field, message), ``warnings``,
        ``summary``, ``sha256``, ``values`` (the parsed predictions or distances) and ``metadata``.

    Raises:
        ValueError: An unknown ``track`` (a usage error, not a problem of the file).
    """
    if track not in TRACKS:
        raise ValueError(f"unknown track {track!r}; choose one of {TRACKS}")
    spath = str(path)
    rep = ValidationReport(path=spath, track=track)
    errs = rep.errors
    id_field, value_field = TRACK_FIELDS[track]
    universe: Mapping[str, Any] | frozenset[str] = blind.turns if track == "detector" else blind.pairs
    if not universe:
        raise ValueError(f"the blind set from {blind.source or '?'} has no "
                         f"{'dialogues' if track == 'detector' else 'Task 2 pairs'}; is --blind the right folder?")

    # ---- metadata (checked even when the file itself is broken: report everything at once)
    md_obj: Any = None
    md_source: str | None = None
    if isinstance(metadata, Mapping):
        md_obj = dict(metadata)
    else:
        mpath = Path(metadata) if metadata is not None else default_metadata_path(path)
        md_source = str(mpath)
        if metadata is not None or require_metadata or mpath.is_file():
            md_obj, probs = load_metadata(mpath)
            errs.extend(probs)
    if md_obj is not None:
        errs.extend(metadata_problems(md_obj, track, md_source))
        rep.metadata = md_obj if isinstance(md_obj, dict) else None

    # ---- the file
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        errs.insert(0, Problem("file_missing", f"submission file {spath} not found", file=spath))
        return rep
    rep.n_bytes = size
    if size > max_bytes:
        too_large = [Problem("too_large", f"file is {size:,} bytes, over the {max_bytes:,}-byte cap; a full "
                                          "submission is far smaller: check that it holds one short line per id",
                             file=spath)]
        long_line = _first_long_line(p, max_bytes, max_line_chars)
        if long_line is not None:
            too_large.append(Problem("line_too_long", f"line is longer than {max_line_chars:,} characters; each line "
                                                      "holds one short JSON object", line=long_line, file=spath))
        errs[:0] = too_large
        return rep
    data = p.read_bytes()
    rep.sha256 = hashlib.sha256(data).hexdigest()
    file_errs: list[Problem] = []
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        errs.insert(0, Problem("not_utf8", "file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as "
                                           "UTF-8 without BOM", line=1, file=spath))
        return rep
    if data.startswith(b"\xef\xbb\xbf"):
        file_errs.append(Problem("bom", "file starts with a UTF-8 byte-order mark; save it as UTF-8 without BOM",
                                 line=1, file=spath))
        data = data[3:]
    if not data.strip():
        file_errs.append(Problem("empty_file", f"file is empty; expected one JSON line per blind "
                                               f"{'dialogue' if track == 'detector' else 'pair'} "
                                               f"({len(universe):,} lines)", file=spath))
        errs[:0] = file_errs
        return rep

    lines = _decode(data, spath, file_errs)
    if lines and lines[-1] == "":
        lines.pop()
    first_line: dict[str, int] = {}
    values: dict[str, Any] = {}
    n_lines = 0
    n_conf = 0
    blank: list[int] = []
    turns = blind.turns
    decode = _decoder.decode
    omitted = 0

    def add(problem: Problem) -> None:  # keep the first problems, count the others
        nonlocal omitted
        if len(file_errs) < MAX_REPORTED_ERRORS:
            file_errs.append(problem)
        else:
            omitted += 1

    for i, line in enumerate(lines, 1):
        if line is None:
            continue
        if line.endswith("\r"):
            line = line[:-1]
        if not line.strip():
            blank.append(i)
            continue
        n_lines += 1
        if len(line) > max_line_chars:
            add(Problem("line_too_long", f"line is {len(line):,} characters long (the cap is {max_line_chars:,}); "
                                         "each line holds one short JSON object", line=i, file=spath))
            continue
        try:
            obj = decode(line)
        except json.JSONDecodeError as e:
            add(Problem("not_json", f"not a JSON object ({e.msg} at column {e.colno}): {_short(line)!r}",
                        line=i, file=spath))
            continue
        except RecursionError:
            add(Problem("not_json", "arrays or objects nested too deeply to read; each line is one flat object",
                        line=i, file=spath))
            continue
        did = obj.get(id_field) if isinstance(obj, dict) else None
        if isinstance(obj, dict) and obj.get("confidence") is not None:
            n_conf += 1
        T = turns.get(did) if (track == "detector" and isinstance(did, str)) else None
        for code, msg, fld in check_line_object(obj, track, T):
            prefix = f"{id_field} {_short(did)!r}: " if isinstance(did, str) and did and code != "bad_id" else ""
            add(Problem(code, prefix + msg, line=i, field=fld, file=spath))
        if not (isinstance(did, str) and did):
            continue
        if did in first_line:
            add(Problem("duplicate_id", f"duplicate {id_field} {_short(did)!r} on lines {first_line[did]} and {i}; "
                                        "keep exactly one line per id",
                        line=i, other_line=first_line[did], field=id_field, file=spath))
            continue
        first_line[did] = i
        if did not in universe:
            what = "blind test set" if track == "detector" else "blind Task 2 pair set"
            add(Problem("unknown_id", f"{id_field} {_short(did)!r} is not in the {what}; "
                                      "was the file made for another release?", line=i, field=id_field, file=spath))
            continue
        values[did] = obj.get(value_field)
    if blank:
        rep.warnings.append(Problem("blank_lines", f"{len(blank)} blank line(s) ignored (first: line {blank[0]})",
                                    line=blank[0], file=spath))
    if n_lines == 0 and not any(p.code == "not_utf8" for p in file_errs):
        file_errs.append(Problem("empty_file", "file holds no JSON lines", file=spath))
    missing = [k for k in universe if k not in first_line]
    if missing and n_lines:
        shown = ", ".join(repr(m) for m in missing[:MISSING_IDS_SHOWN])
        what = "blind dialogues have no prediction" if track == "detector" else "blind pairs have no distance"
        fix = ("add a line with \"prediction\": null for each dialogue the detector does not flag"
               if track == "detector" else "give a distance for every pair of data/blind_task2")
        add(Problem("missing_ids", f"{len(missing):,} of {len(universe):,} {what} (first: {shown}); {fix}",
                    field=id_field, file=spath))
    errs[:0] = file_errs
    rep.n_omitted += omitted
    rep.cap_errors()
    if not errs:
        rep.values = values
    rep.summary = _summary(track, values, n_lines, len(universe), n_conf)
    return rep


def _summary(track: str, values: Mapping[str, Any], n_lines: int, n_blind: int, n_conf: int) -> dict[str, Any]:
    s: dict[str, Any] = {"lines": n_lines, "blind_size": n_blind, "valid_ids": len(values)}
    if track == "detector":
        flagged = sum(1 for v in values.values() if v is not None)
        s["flagged"] = flagged
        s["not_flagged"] = len(values) - flagged
        s["share_flagged"] = round(flagged / len(values), 4) if values else None
        s["with_confidence"] = n_conf
    else:
        vals = [float(v) for v in values.values() if type(v) in (int, float)]
        if vals:
            s["distance_min"] = min(vals)
            s["distance_max"] = max(vals)
    return s


def validate_detector(path, blind: BlindSet, **kw) -> ValidationReport:
    return validate_submission(path, "detector", blind, **kw)


def validate_metric(path, blind: BlindSet, **kw) -> ValidationReport:
    return validate_submission(path, "metric", blind, **kw)
