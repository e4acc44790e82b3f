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

Modules: :mod:`.report` (limits, :class:`Problem`, :class:`ValidationReport`,
:class:`SubmissionError`), :mod:`.schemas` (JSON Schemas, metadata), :mod:`.blind` (the blind
set), :mod:`.lines` (one line), :mod:`.file` (:func:`validate_submission`); every name is
re-exported here.
"""

from __future__ import annotations

from .blind import BlindSet
from .file import validate_detector, validate_metric, validate_submission
from .lines import check_line_object
from .report import (
    DEFAULT_MAX_BYTES,
    MAX_LINE_CHARS,
    MAX_REPORTED_ERRORS,
    MISSING_IDS_SHOWN,
    REGIMES,
    SCHEMA_DIR,
    SCHEMA_FILES,
    TRACK_FIELDS,
    TRACKS,
    Problem,
    SubmissionError,
    ValidationReport,
)
from .schemas import (
    MAX_METADATA_BYTES,
    default_metadata_path,
    ecma_pattern,
    load_metadata,
    load_schema,
    metadata_problems,
    private_metadata_fields,
    public_metadata,
    schema_validator,
    strict_validator_class,
)

__all__ = [
    "BlindSet",
    "DEFAULT_MAX_BYTES",
    "MAX_LINE_CHARS",
    "MAX_METADATA_BYTES",
    "MAX_REPORTED_ERRORS",
    "MISSING_IDS_SHOWN",
    "Problem",
    "REGIMES",
    "SCHEMA_DIR",
    "SCHEMA_FILES",
    "SubmissionError",
    "TRACKS",
    "TRACK_FIELDS",
    "ValidationReport",
    "check_line_object",
    "default_metadata_path",
    "ecma_pattern",
    "load_metadata",
    "load_schema",
    "metadata_problems",
    "private_metadata_fields",
    "public_metadata",
    "schema_validator",
    "strict_validator_class",
    "validate_detector",
    "validate_metric",
    "validate_submission",
]
