"""JSON Lines I/O that never loses data.

* :func:`write_jsonl` writes a whole file atomically (temp file in the same folder + ``os.replace``).
* :class:`JsonlAppender` appends complete lines only (one ``write`` of ``line + "\\n"`` then
  flush + fsync), so a killed process leaves at worst one torn last line, which
  :func:`repair_torn_tail` detects and drops before resuming.
* :func:`read_jsonl` reports the file and line number of a malformed line; with
  ``collect=True`` it reports every bad line at once.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .atomic import atomic_open, make_public, write_json_atomic, write_text_atomic  # noqa: F401 (re-exported)
from .errors import CollectedErrors
from .records import OversizedInt

logger = logging.getLogger(__name__)


class JsonlError(CollectedErrors):
    """A JSON Lines file holds malformed lines; ``errors`` lists each ``path:line: reason``.

    Args:
        message: The exception's text.
        errors: Every problem, one ``path:line: reason`` line each; defaults to ``[message]``.
    """


def json_error_text(e: json.JSONDecodeError, line: bool = False) -> str:
    """What is wrong with a JSON text and where, in one phrase.

    Python's messages for an unterminated string already end in "at" ("Unterminated string starting
    at"); this adds the position once, so the phrase never reads "starting at at column".

    Args:
        e: The decoding error.
        line: Also name the line (a multi-line document).

    Returns:
        str: e.g. ``"Unterminated string starting at column 12"``, ``"Expecting value at line 2 column 1"``.

    Example:
        >>> try:
        ...     json.loads('{"a": "b')
        ... except json.JSONDecodeError as e:
        ...     print(json_error_text(e))
        Unterminated string starting at column 7
    """
    where = f"line {e.lineno} column {e.colno}" if line else f"column {e.colno}"
    return f"{e.msg} {where}" if e.msg.endswith(" at") else f"{e.msg} at {where}"


def dumps(obj: Any) -> str:
    """Canonical one-line JSON (UTF-8, no ASCII escaping, stable separators).

    Args:
        obj: A JSON-serialisable value.

    Returns:
        str: The JSON text, without a newline (separators ``","`` and ``":"``).
    """
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _open_text(path: Path, mode: str):
    if str(path).endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="utf-8")
    return open(path, mode, encoding="utf-8", newline="\n")


def _open_binary(path: Path):
    if str(path).endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def iter_jsonl(path: str | os.PathLike, collect: bool = False) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, object)``; blank lines are skipped.

    A malformed line raises :class:`JsonlError` naming ``path:line``. With ``collect=True`` all
    good lines are yielded first and one error listing every bad line is raised at the end.
    Malformed means: not UTF-8 (each line is decoded on its own, so a bad byte is reported on
    its own line), not JSON, or nesting too deep to parse.

    An integer literal too long to convert is not malformed: it is yielded as
    :class:`~dialfork_dataset.records.OversizedInt` (record validation names it).
    A ``.gz`` file is read as gzip.

    Args:
        path: The JSON Lines file.
        collect: Report every malformed line at the end instead of raising at the first.

    Yields:
        tuple[int, Any]: ``(line_number, object)``, line numbers 1-based.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        JsonlError: A malformed line (with ``collect``: every one, after the good lines), or a
            damaged gzip stream.
    """
    path = Path(path)
    errors: list[str] = []
    try:
        fh = _open_binary(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    with fh:
        lineno = 0
        for raw in _lines(fh, path):
            lineno += 1
            if not raw.strip():
                continue
            msg = None
            try:
                obj = json.loads(raw.decode("utf-8"), parse_int=_parse_int)
            except UnicodeDecodeError as e:
                msg = (
                    f"{path}:{lineno}: {_context(raw.decode('utf-8', 'replace'), _BAD_UTF8)}not valid UTF-8 "
                    f"(byte 0x{raw[e.start]:02x} at byte {e.start + 1} of the line: {e.reason})"
                )
            except json.JSONDecodeError as e:
                msg = f"{path}:{lineno}: malformed JSON ({json_error_text(e)})"
            except RecursionError:
                msg = (
                    f"{path}:{lineno}: {_context(raw.decode('utf-8', 'replace'), _TOO_DEEP)}malformed JSON "
                    "(nested too deeply to parse)"
                )
            if msg is not None:
                if not collect:
                    raise JsonlError(msg + "; fix or remove that line", [msg]) from None
                errors.append(msg)
                continue
            yield lineno, obj
    JsonlError.raise_if(errors, f"{path} (malformed lines)")


def _parse_int(text: str) -> int | OversizedInt:
    try:
        return int(text)
    except ValueError:  # beyond sys.get_int_max_str_digits()
        return OversizedInt(len(text.lstrip("-")))


_BAD_UTF8, _TOO_DEEP = "bad-utf8", "too-deep"
_ID_RE = re.compile(r'"dialogue_id"\s*:\s*("(?:[^"\\]|\\.){0,200}")')
_MAX_SCAN_DEPTH = 64


def _context(text: str, problem: str) -> str:
    """``"dialogue_id='x': field: "`` for a line that could not be parsed, when it can be read off
    the text (the id by a pattern, the top-level field by a scan that tracks string and bracket
    state); ``""`` otherwise."""
    did = None
    m = _ID_RE.search(text)
    if m:
        try:
            did = json.loads(m.group(1))
        except ValueError:
            did = None
    field = None
    depth, key, in_str, esc, start, last_str = 0, None, False, False, 0, None
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                last_str = text[start + 1 : i]
                if problem == _BAD_UTF8 and "\ufffd" in last_str:
                    field = key if depth > 1 or key is not None else last_str
                    break
            continue
        if ch == '"':
            in_str, start = True, i
        elif ch == ":" and depth == 1:
            key = last_str
        elif ch in "[{":
            depth += 1
            if problem == _TOO_DEEP and depth > _MAX_SCAN_DEPTH:
                field = key
                break
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 1:
            key = None
    out = "" if did is None else f"dialogue_id={did!r}: "
    return out + ("" if field is None else f"{field}: ")


def _lines(fh, path: Path) -> Iterator[bytes]:
    """Lines of a binary file; a damaged gzip stream is a :class:`JsonlError` naming the file."""
    try:
        yield from fh
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise JsonlError(f"{path}: cannot read ({e})", [f"{path}: cannot read ({e})"]) from None


def read_jsonl(path: str | os.PathLike, collect: bool = False) -> list[Any]:
    """Every object of a JSON Lines file (``.gz`` read as gzip), in file order; blank lines skipped.

    Args:
        path: The file.
        collect: False raises at the first malformed line; True reads the whole file and raises
            one error listing every malformed line.

    Returns:
        list[Any]: The parsed objects (one per non-blank line).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        JsonlError: A line is not UTF-8, not JSON, or nested too deeply, or a gzip stream is
            damaged; each problem names ``path:line`` (see :func:`iter_jsonl`).
    """
    return [obj for _, obj in iter_jsonl(path, collect=collect)]


def write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> int:
    """Atomically write ``rows`` to ``path`` (temporary file + rename, ``dialfork_dataset.atomic.atomic_open``).

    Args:
        path: The output file.
        rows: JSON-serialisable objects, one per line.

    Returns:
        The number of rows written.
    """
    n = 0
    with atomic_open(path, "w") as fh:
        for r in rows:
            fh.write(dumps(r) + "\n")
            n += 1
    return n


def repair_torn_tail(path: str | os.PathLike) -> int:
    """Drop a torn (incomplete or unparsable) last line left by a killed writer.

    Args:
        path: A JSON Lines file being appended to.

    Returns:
        The number of bytes removed (0 when the file ends cleanly or does not exist).
    """
    path = Path(path)
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb+") as fh:
        # find the start of the last line
        block = 1 << 16
        pos = size
        tail = b""
        while pos > 0:
            step = min(block, pos)
            pos -= step
            fh.seek(pos)
            tail = fh.read(step) + tail
            idx = tail.rstrip(b"\n").rfind(b"\n") if tail.endswith(b"\n") else tail.rfind(b"\n")
            if idx >= 0:
                start = pos + idx + 1
                break
        else:
            start = 0
        fh.seek(start)
        last = fh.read()
        ok = last.endswith(b"\n")
        if ok:
            try:
                json.loads(last.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                ok = False
        if ok:
            return 0
        fh.truncate(start)
        fh.flush()
        os.fsync(fh.fileno())
    removed = size - start
    logger.warning("%s: dropped a torn last line (%d bytes) left by an interrupted run", path, removed)
    return removed


class JsonlAppender:
    """Append complete JSON lines to a file; safe to kill at any point (see module doc).

    Opening creates the parent folders and drops a torn last line left by a killed writer
    (:func:`repair_torn_tail`). Use as a context manager, or call :meth:`close`.

    Args:
        path: The JSON Lines file to append to (created if missing).
        fsync: ``os.fsync`` after every :meth:`append` / :meth:`extend`, so a written line survives
            a machine crash; False only flushes (faster, safe against a killed process only).
    """

    def __init__(self, path: str | os.PathLike, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(self.path)
        self._fh = open(self.path, "ab")
        self._fsync = fsync

    def append(self, obj: Any) -> None:
        """Write ``obj`` as one line (one ``write``), then flush (and fsync).

        Args:
            obj: A JSON-serialisable object.
        """
        self._fh.write((dumps(obj) + "\n").encode("utf-8"))
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())

    def extend(self, objs: Iterable[Any]) -> None:
        """Write every object as one line each, in a single ``write``, then flush (and fsync).

        Args:
            objs: JSON-serialisable objects; nothing is written when empty.
        """
        data = b"".join((dumps(o) + "\n").encode("utf-8") for o in objs)
        if data:
            self._fh.write(data)
            self._fh.flush()
            if self._fsync:
                os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Close the file (idempotent)."""
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def validate_jsonl_file(path: str | os.PathLike) -> list[Mapping[str, Any]]:
    """Read a record file and validate every line; raise one error listing every bad line.

    Args:
        path: A JSON Lines file of records.

    Returns:
        The records, in file order.

    Raises:
        RecordError: Every bad line, each naming ``path:line``, the dialogue id and the field.
    """
    from .records import RecordError, dialogue_id_of, record_errors

    path = Path(path)
    errors: list[str] = []
    records: list[Mapping[str, Any]] = []
    seen: dict[str, int] = {}
    try:
        for lineno, obj in iter_jsonl(path, collect=True):
            errs = record_errors(obj)
            did = obj.get("dialogue_id") if isinstance(obj, Mapping) else None
            for e in errs:
                errors.append(f"{path}:{lineno}: dialogue_id={dialogue_id_of(obj)}: {e}")
            if isinstance(did, str):
                if did in seen:
                    errors.append(
                        f"{path}:{lineno}: dialogue_id={did!r}: duplicate id (first on line {seen[did]})"
                    )
                else:
                    seen[did] = lineno
            records.append(obj)
    except JsonlError as e:
        errors.extend(e.errors)
    RecordError.raise_if(errors, str(path))
    return records
