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
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class JsonlError(ValueError):
    """A JSON Lines file holds malformed lines; ``errors`` lists each ``path:line: reason``."""

    def __init__(self, message: str, errors: list[str]):
        super().__init__(message)
        self.errors = errors


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_public(fd_or_path: int | str | os.PathLike) -> None:
    """Give a temp file from ``mkstemp`` (mode 0600) the mode a normal ``open`` would (0666 & ~umask)."""
    mode = 0o666 & ~_umask()
    if isinstance(fd_or_path, int):
        os.fchmod(fd_or_path, mode)
    else:
        os.chmod(fd_or_path, mode)


def dumps(obj: Any) -> str:
    """Canonical one-line JSON (UTF-8, no ASCII escaping, stable separators)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _open_text(path: Path, mode: str):
    if str(path).endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="utf-8")
    return open(path, mode, encoding="utf-8", newline="\n")


def iter_jsonl(path: str | os.PathLike, collect: bool = False) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, object)``; blank lines are skipped.

    A malformed line raises :class:`JsonlError` naming ``path:line``. With ``collect=True`` all
    good lines are yielded first and one error listing every bad line is raised at the end.
    """
    path = Path(path)
    errors: list[str] = []
    try:
        fh = _open_text(path, "r")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    with fh:
        lineno = 0
        while True:
            try:
                line = fh.readline()
            except UnicodeDecodeError as e:
                raise JsonlError(f"{path}:{lineno + 1}: not valid UTF-8 ({e.reason})",
                                 [f"{path}:{lineno + 1}: not valid UTF-8"]) from None
            if not line:
                break
            lineno += 1
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                msg = f"{path}:{lineno}: malformed JSON ({e.msg} at column {e.colno})"
                if not collect:
                    raise JsonlError(msg + "; fix or remove that line", [msg]) from None
                errors.append(msg)
                continue
            yield lineno, obj
    if errors:
        raise JsonlError(f"{len(errors)} malformed line(s) in {path}:\n" + "\n".join(errors), errors)


def read_jsonl(path: str | os.PathLike, collect: bool = False) -> list[Any]:
    return [obj for _, obj in iter_jsonl(path, collect=collect)]


def write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> int:
    """Atomically write ``rows`` to ``path`` (temp file + rename). Returns the number of rows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    make_public(fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            for r in rows:
                fh.write(dumps(r) + "\n")
                n += 1
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return n


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    make_public(fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    write_text_atomic(path, json.dumps(obj, ensure_ascii=False, indent=indent, sort_keys=False) + "\n")


def repair_torn_tail(path: str | os.PathLike) -> int:
    """Drop a torn (incomplete or unparsable) last line left by a killed writer.

    Returns the number of bytes removed (0 when the file ends cleanly or does not exist).
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
    """Append complete JSON lines to a file; safe to kill at any point (see module doc)."""

    def __init__(self, path: str | os.PathLike, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(self.path)
        self._fh = open(self.path, "ab")
        self._fsync = fsync

    def append(self, obj: Any) -> None:
        self._fh.write((dumps(obj) + "\n").encode("utf-8"))
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())

    def extend(self, objs: Iterable[Any]) -> None:
        data = b"".join((dumps(o) + "\n").encode("utf-8") for o in objs)
        if data:
            self._fh.write(data)
            self._fh.flush()
            if self._fsync:
                os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def validate_jsonl_file(path: str | os.PathLike) -> list[Mapping[str, Any]]:
    """Read a record file and validate every line; raise one error listing every bad line.

    Each error names ``path:line``, the dialogue id and the field. Returns the records.
    """
    from .records import RecordError, record_errors

    path = Path(path)
    errors: list[str] = []
    records: list[Mapping[str, Any]] = []
    seen: dict[str, int] = {}
    try:
        for lineno, obj in iter_jsonl(path, collect=True):
            errs = record_errors(obj)
            did = obj.get("dialogue_id") if isinstance(obj, Mapping) else None
            for e in errs:
                errors.append(f"{path}:{lineno}: dialogue_id={did!r}: {e}")
            if isinstance(did, str):
                if did in seen:
                    errors.append(f"{path}:{lineno}: dialogue_id={did!r}: duplicate id (first on line {seen[did]})")
                else:
                    seen[did] = lineno
            records.append(obj)
    except JsonlError as e:
        errors.extend(e.errors)
    if errors:
        raise RecordError(f"{len(errors)} error(s) in {path}:\n" + "\n".join(errors), errors)
    return records
