"""The one atomic-write helper: a file appears whole under its final name or not at all.

Every output DialFork writes (records, caches, reports, results, fitted detectors) goes through
:func:`atomic_path` (for writers that need a path, e.g. ``np.savez`` or ONNX export) or one of the
convenience writers built on it. The temporary file lives in the destination folder (so
``os.replace`` is atomic on POSIX and Windows), is fsynced before the rename, gets the mode a plain
``open`` would give it, and is removed when the writer fails.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_text_atomic(d / "out" / "a.txt", "hello\\n")
>>> (d / "out" / "a.txt").read_text()
'hello\\n'
>>> with atomic_path(d / "b.bin") as tmp:
...     _ = tmp.write_bytes(b"xyz")
>>> (d / "b.bin").read_bytes(), sorted(p.name for p in d.iterdir())
(b'xyz', ['b.bin', 'out'])
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_public(fd_or_path: int | str | os.PathLike) -> None:
    """Give a temp file from ``mkstemp`` (mode 0600) the mode a normal ``open`` would (0666 & ~umask).

    Args:
        fd_or_path: An open file descriptor (``fchmod``) or a path (``chmod``).
    """
    mode = 0o666 & ~_umask()
    if isinstance(fd_or_path, int):
        os.fchmod(fd_or_path, mode)
    else:
        os.chmod(fd_or_path, mode)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path`` atomically.

    Args:
        path: the final file; its folder is created if missing.
        suffix: the temporary file's suffix (some writers, like ``np.savez``, need ``".npz"``).

    Yields:
        The temporary file's path (it exists, empty); write it completely inside the block.

    Raises:
        Whatever the block raises; the temporary file is removed and ``path`` is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    make_public(fd)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any):
    """``open`` a temporary file for writing (``"w"`` or ``"wb"``) that replaces ``path`` on success.

    Text mode defaults to UTF-8 with ``\\n`` newlines.

    Args:
        path: The final file; its folder is created if missing.
        mode: ``"w"`` (text) or ``"wb"`` (binary).
        **kwargs: Passed on to ``open`` (e.g. ``encoding``).

    Yields:
        The open temporary file; when the block ends without an exception it is flushed, synced
        and renamed onto ``path``; otherwise it is removed and ``path`` is left untouched.

    Raises:
        ValueError: ``mode`` is not ``"w"`` or ``"wb"``.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', got {mode!r}")
    if mode == "w":
        kwargs.setdefault("encoding", "utf-8")
        kwargs.setdefault("newline", "\n")
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as fh:
        yield fh
        fh.flush()


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically.

    Args:
        path: The file to write (its folder is created if missing).
        data: The bytes.
    """
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8, ``\\n`` newlines) to ``path`` atomically.

    Args:
        path: The file to write (its folder is created if missing).
        text: The text.
    """
    with atomic_open(path, "w") as fh:
        fh.write(text)


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    """Write ``obj`` as JSON (UTF-8, not ASCII-escaped, trailing newline) to ``path`` atomically.

    Args:
        path: The file to write (its folder is created if missing).
        obj: A JSON-serialisable value.
        indent: ``json.dumps``'s indent; None writes one line.
    """
    write_text_atomic(path, json.dumps(obj, ensure_ascii=False, indent=indent) + "\n")
