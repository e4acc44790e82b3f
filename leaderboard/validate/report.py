"""The validator's limits and its outcome: :class:`Problem`, :class:`ValidationReport`, :class:`SubmissionError`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dialfork_dataset.errors import MAX_ERRORS_IN_MESSAGE, CollectedErrors

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
REGIMES = ("streaming", "streaming+workflow", "offline", "offline+workflow")
#: The regimes given the ground-truth workflow: the page ranks them in a table of their own.
WORKFLOW_REGIMES = ("streaming+workflow", "offline+workflow")
SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schema"
SCHEMA_FILES = {
    "detector": "detector_submission.v1.json",
    "metric": "metric_submission.v1.json",
    "metadata": "metadata.v1.json",
    "result": "result.v1.json",
}
#: JSON field holding the id, and the value field, of each track's lines.
TRACK_FIELDS = {"detector": ("dialogue_id", "prediction"), "metric": ("pair_id", "distance")}


class SubmissionError(CollectedErrors):
    """A submission failed validation; ``report`` is the full :class:`ValidationReport` and
    ``errors`` its problems, one ``file:line: message`` line each.

    Args:
        report: The failed report; the message is its text form with the first
            ``MAX_ERRORS_IN_MESSAGE`` errors.
    """

    def __init__(self, report: ValidationReport):
        self.report = report
        super().__init__(
            report.format_text(max_errors=MAX_ERRORS_IN_MESSAGE), [str(p) for p in report.errors]
        )


# --------------------------------------------------------------------------- report


@dataclass
class Problem:
    """One problem: a machine-readable ``code``, a message saying what to fix, and where.

    ``str(problem)`` is ``"file:line: message"`` (or ``"line N: message"`` without a file).

    Attributes:
        code: A stable machine-readable kind (e.g. ``"duplicate_id"``, ``"not_utf8"``,
            ``"metadata_invalid"``).
        message: What is wrong and how to fix it, in plain words.
        line: The 1-based line number in the file, or None for a whole-file problem.
        other_line: For a duplicate, the line of the first occurrence; else None.
        field: The JSON field concerned, or None.
        file: The file concerned (the submission or its metadata), or None.
    """

    code: str
    message: str
    line: int | None = None
    other_line: int | None = None
    field: str | None = None
    file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The problem as JSON.

        Returns:
            ``code``, ``file``, ``line``, ``other_line``, ``field`` and ``message``, without
            the fields that are None.
        """
        return {
            k: v
            for k, v in (
                ("code", self.code),
                ("file", self.file),
                ("line", self.line),
                ("other_line", self.other_line),
                ("field", self.field),
                ("message", self.message),
            )
            if v is not None
        }

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
    ``n_errors`` counts them all (``n_omitted`` = how many were counted but not kept).

    Attributes:
        path: The submission file, as given.
        track: ``"detector"`` or ``"metric"``.
        errors: The problems that make the submission invalid (at most
            :data:`MAX_REPORTED_ERRORS` kept).
        warnings: Problems that do not block scoring.
        summary: Counts about a valid submission (lines, predictions, abstentions, ...),
            shown by :meth:`format_text`.
        sha256: SHA-256 hex digest of the file's bytes, or None when it was not read.
        n_bytes: The file's size in bytes, or None.
        values: The parsed predictions (detector: id -> turn or None) or distances (metric:
            pair id -> float), by id.
        metadata: The parsed metadata object, or None.
        n_omitted: Errors counted but not kept in ``errors``.
    """

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
        """True when the submission has no error (warnings allowed)."""
        return not self.errors

    @property
    def n_errors(self) -> int:
        """Every error found: those kept in ``errors`` plus ``n_omitted``."""
        return len(self.errors) + self.n_omitted

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON (what ``--json`` prints), without ``values`` and ``metadata``.

        Returns:
            ``ok``, ``file``, ``track``, ``sha256``, ``bytes``, ``n_errors``, ``errors`` (each a
            :meth:`Problem.to_dict`), ``errors_omitted``, ``warnings`` and ``summary``.
        """
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
        """The report as text for a terminal.

        Args:
            max_errors: Errors listed before "... and N more"; None lists every kept error.

        Returns:
            A first line (valid, or how many errors), then the summary or the errors, then the
            warnings, one per line.
        """
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
                hint = (
                    " (use --json for the first " + str(len(self.errors)) + ")"
                    if len(shown) < len(self.errors)
                    else ""
                )
                lines.append(f"  ... and {self.n_errors - len(shown):,} more{hint}")
        for w in self.warnings:
            lines.append(f"  warning: {w}")
        return "\n".join(lines)

    def cap_errors(self, limit: int | None = None) -> None:
        """Keep the first ``limit`` errors (default :data:`MAX_REPORTED_ERRORS`), count the rest.

        Args:
            limit: Errors to keep; None: :data:`MAX_REPORTED_ERRORS`.
        """
        limit = MAX_REPORTED_ERRORS if limit is None else limit
        if len(self.errors) > limit:
            self.n_omitted += len(self.errors) - limit
            del self.errors[limit:]

    def raise_for_errors(self) -> None:
        """Raise when the submission is invalid; return otherwise.

        Raises:
            SubmissionError: The report has errors (it is the exception's ``report``).
        """
        if self.errors:
            raise SubmissionError(self)
