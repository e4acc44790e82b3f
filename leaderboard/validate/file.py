"""Validating a whole submission file: size, encoding, every line, ids against the blind set."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dialfork_dataset.jsonl import json_error_text

from .blind import BlindSet
from .lines import _decoder, _short, check_line_object
from .report import (
    DEFAULT_MAX_BYTES,
    MAX_LINE_CHARS,
    MAX_REPORTED_ERRORS,
    MISSING_IDS_SHOWN,
    TRACK_FIELDS,
    TRACKS,
    Problem,
    ValidationReport,
)
from .schemas import default_metadata_path, load_metadata, metadata_problems

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
                errors.append(
                    Problem(
                        "not_utf8",
                        f"not valid UTF-8 (byte {raw[e.start : e.start + 1]!r} at column "
                        f"{e.start + 1}); save the file as UTF-8",
                        line=i,
                        file=path,
                    )
                )
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
        ValueError: An unknown ``track``, or a blind set without dialogues (detector) or Task 2
            pairs (metric): usage errors, not problems of the file.
    """
    if track not in TRACKS:
        raise ValueError(f"unknown track {track!r}; choose one of {TRACKS}")
    spath = str(path)
    rep = ValidationReport(path=spath, track=track)
    errs = rep.errors
    id_field, value_field = TRACK_FIELDS[track]
    universe: Mapping[str, Any] | frozenset[str] = blind.turns if track == "detector" else blind.pairs
    if not universe:
        raise ValueError(
            f"the blind set from {blind.source or '?'} has no "
            f"{'dialogues' if track == 'detector' else 'Task 2 pairs'}; is --blind the right folder?"
        )

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
        too_large = [
            Problem(
                "too_large",
                f"file is {size:,} bytes, over the {max_bytes:,}-byte cap; a full "
                "submission is far smaller: check that it holds one short line per id",
                file=spath,
            )
        ]
        long_line = _first_long_line(p, max_bytes, max_line_chars)
        if long_line is not None:
            too_large.append(
                Problem(
                    "line_too_long",
                    f"line is longer than {max_line_chars:,} characters; each line "
                    "holds one short JSON object",
                    line=long_line,
                    file=spath,
                )
            )
        errs[:0] = too_large
        return rep
    data = p.read_bytes()
    rep.sha256 = hashlib.sha256(data).hexdigest()
    file_errs: list[Problem] = []
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        errs.insert(
            0,
            Problem(
                "not_utf8",
                "file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8 without BOM",
                line=1,
                file=spath,
            ),
        )
        return rep
    if data.startswith(b"\xef\xbb\xbf"):
        file_errs.append(
            Problem(
                "bom",
                "file starts with a UTF-8 byte-order mark; save it as UTF-8 without BOM",
                line=1,
                file=spath,
            )
        )
        data = data[3:]
    if not data.strip():
        file_errs.append(
            Problem(
                "empty_file",
                f"file is empty; expected one JSON line per blind "
                f"{'dialogue' if track == 'detector' else 'pair'} "
                f"({len(universe):,} lines)",
                file=spath,
            )
        )
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
    other_track = next(t for t in TRACKS if t != track)
    other_id = TRACK_FIELDS[other_track][0]
    n_other = 0  # lines shaped like the other track's (a pair_id where a dialogue_id is expected)

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
            add(
                Problem(
                    "line_too_long",
                    f"line is {len(line):,} characters long (the cap is {max_line_chars:,}); "
                    "each line holds one short JSON object",
                    line=i,
                    file=spath,
                )
            )
            continue
        try:
            obj = decode(line)
        except json.JSONDecodeError as e:
            add(
                Problem(
                    "not_json",
                    f"not a JSON object ({json_error_text(e)}): {_short(line)!r}",
                    line=i,
                    file=spath,
                )
            )
            continue
        except RecursionError:
            add(
                Problem(
                    "not_json",
                    "arrays or objects nested too deeply to read; each line is one flat object",
                    line=i,
                    file=spath,
                )
            )
            continue
        did = obj.get(id_field) if isinstance(obj, dict) else None
        if isinstance(obj, dict) and other_id in obj and id_field not in obj:
            n_other += 1
        if isinstance(obj, dict) and obj.get("confidence") is not None:
            n_conf += 1
        T = turns.get(did) if (track == "detector" and isinstance(did, str)) else None
        for code, msg, fld in check_line_object(obj, track, T):
            prefix = (
                f"{id_field} {_short(did)!r}: " if isinstance(did, str) and did and code != "bad_id" else ""
            )
            add(Problem(code, prefix + msg, line=i, field=fld, file=spath))
        if not (isinstance(did, str) and did):
            continue
        if did in first_line:
            add(
                Problem(
                    "duplicate_id",
                    f"duplicate {id_field} {_short(did)!r} on lines {first_line[did]} and {i}; "
                    "keep exactly one line per id",
                    line=i,
                    other_line=first_line[did],
                    field=id_field,
                    file=spath,
                )
            )
            continue
        first_line[did] = i
        if did not in universe:
            what = "blind test set" if track == "detector" else "blind Task 2 pair set"
            add(
                Problem(
                    "unknown_id",
                    f"{id_field} {_short(did)!r} is not in the {what}; "
                    "was the file made for another release?",
                    line=i,
                    field=id_field,
                    file=spath,
                )
            )
            continue
        values[did] = obj.get(value_field)
    if blank:
        rep.warnings.append(
            Problem(
                "blank_lines",
                f"{len(blank)} blank line(s) ignored (first: line {blank[0]})",
                line=blank[0],
                file=spath,
            )
        )
    if n_lines == 0 and not any(p.code == "not_utf8" for p in file_errs):
        file_errs.append(Problem("empty_file", "file holds no JSON lines", file=spath))
    missing = [k for k in universe if k not in first_line]
    if missing and n_lines:
        shown = ", ".join(repr(m) for m in missing[:MISSING_IDS_SHOWN])
        what = "blind dialogues have no prediction" if track == "detector" else "blind pairs have no distance"
        fix = (
            'add a line with "prediction": null for each dialogue the detector does not flag'
            if track == "detector"
            else "give a distance for every pair of data/blind_task2"
        )
        add(
            Problem(
                "missing_ids",
                f"{len(missing):,} of {len(universe):,} {what} (first: {shown}); {fix}",
                field=id_field,
                file=spath,
            )
        )
    if n_lines and n_other * 2 >= n_lines:
        file_errs.insert(
            0,
            Problem(
                "wrong_track",
                f"the file looks like a {other_track}-track submission ({n_other:,} of {n_lines:,} lines have "
                f"{other_id!r}, the {other_track} track's id, and no {id_field!r}): pass --track {other_track} "
                f"(the errors below are what checking it as a {track}-track file finds)",
                field=id_field,
                file=spath,
            ),
        )
    errs[:0] = file_errs
    rep.n_omitted += omitted
    rep.cap_errors()
    if not errs:
        rep.values = values
    rep.summary = _summary(track, values, n_lines, len(universe), n_conf)
    return rep


def _summary(
    track: str, values: Mapping[str, Any], n_lines: int, n_blind: int, n_conf: int
) -> dict[str, Any]:
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
    """:func:`validate_submission` on the detector track (Task 3 predictions).

    Args:
        path: The submission file (one ``{"dialogue_id", "prediction"}`` line per blind
            dialogue).
        blind: The blind set (ids and T).
        **kw: The keyword arguments of :func:`validate_submission` (``metadata``,
            ``require_metadata``, ``max_bytes``, ``max_line_chars``).

    Returns:
        The :class:`ValidationReport`.

    Raises:
        ValueError: The blind set has no dialogues.
    """
    return validate_submission(path, "detector", blind, **kw)


def validate_metric(path, blind: BlindSet, **kw) -> ValidationReport:
    """:func:`validate_submission` on the metric track (Task 2 distances).

    Args:
        path: The submission file (one ``{"pair_id", "distance"}`` line per blind pair).
        blind: The blind set (its Task 2 pair ids).
        **kw: The keyword arguments of :func:`validate_submission` (``metadata``,
            ``require_metadata``, ``max_bytes``, ``max_line_chars``).

    Returns:
        The :class:`ValidationReport`.

    Raises:
        ValueError: The blind set has no Task 2 pairs.
    """
    return validate_submission(path, "metric", blind, **kw)
