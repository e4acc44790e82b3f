"""Shard files: each shard's records, appended one unit (scenario) at a time, and read back on resume.

A unit's records are followed by a ``{"_unit": ...}`` marker line, written in the same write; a unit
counts as done when its marker is on disk, and everything after the last marker (an unfinished
unit, a torn line) is cut off on resume.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dialfork_dataset.jsonl import repair_torn_tail

from ..errors import GenerationError

logger = logging.getLogger("generation")

SHARDS_DIR = "shards"
RUN_FILE = "run.json"
UNIT_MARKER = '{"_unit":'


def shard_path(out: Path, shard_index: int, num_shards: int) -> Path:
    """The file of shard ``shard_index`` of ``num_shards`` in the output folder ``out``.

    Args:
        out: the run's output folder.
        shard_index: the 0-based shard index.
        num_shards: the number of shards.

    Returns:
        ``out/shards/shard-IIIII-of-NNNNN.jsonl.part`` (both numbers zero-padded to 5 digits).
    """
    return out / SHARDS_DIR / f"shard-{shard_index:05d}-of-{num_shards:05d}.jsonl.part"


def line_hash(line: bytes) -> str:
    """The hash of one record line (without its newline) kept in its unit's marker: the first 16
    hex digits of its SHA-256.

    Args:
        line: the record line's UTF-8 bytes, without its newline.

    Returns:
        16 lowercase hex digits.
    """
    return hashlib.sha256(line).hexdigest()[:16]


def verify_shard_block(path: Path, marker: Mapping[str, Any], block: bytes) -> list[str]:
    """Problems of one unit's records in a shard, each ``path:line: dialogue_id=...: reason``:
    a line whose hash differs from the one its marker recorded at generation time (any change,
    even one that keeps the length), a line that is not JSON, a record that fails validation.
    A line whose hash matches is the record the generator validated before writing it; shards
    written before markers carried hashes are validated record by record.

    Args:
        path: the shard file (used in the messages only).
        marker: the unit's marker as :func:`read_shard` returns it (``_unit``, ``records``,
            ``line``, and ``line_sha256`` when written by this version).
        block: the unit's record bytes as read from the shard (``marker["bytes"]`` from
            ``marker["offset"]``).

    Returns:
        Every problem found, one message each; empty when the block is intact. A block whose
            line count differs from ``marker["records"]`` gives that one problem only.
    """
    from dialfork_dataset.records import dialogue_id_of, record_errors

    first = int(marker.get("line", 0))
    lines = block.split(b"\n")
    if lines[-1] != b"" or len(lines) - 1 != marker["records"]:
        return [
            f"{path}:{first}: unit {marker['_unit']!r}: {len(lines) - 1} record line(s) where the marker "
            f"says {marker['records']}"
        ]
    hashes = marker.get("line_sha256")
    hashed = isinstance(hashes, list) and len(hashes) == len(lines) - 1
    errs: list[str] = []
    for j, raw in enumerate(lines[:-1]):
        if hashed and line_hash(raw) == hashes[j]:
            continue  # the very line the generator validated and wrote
        where = f"{path}:{first + j}"
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            errs.append(f"{where}: not a JSON record ({type(e).__name__})")
            continue
        did = dialogue_id_of(obj)
        if hashed:  # and the hash differs
            errs.append(
                f"{where}: dialogue_id={did}: the record differs from the one written at generation "
                "time (hash mismatch)"
            )
        errs.extend(f"{where}: dialogue_id={did}: {e}" for e in record_errors(obj))
    return errs


def read_shard(path: Path, truncate: bool = False) -> dict[str, dict[str, Any]]:
    """The finished units of a shard file: ``unit_id -> marker`` (with ``offset`` of its records
    and ``line``, the 1-based line number of its first record).

    With ``truncate=True`` everything after the last marker (an unfinished unit, a torn line) is
    cut off the file.

    Args:
        path: the shard file; a missing file has no finished unit.
        truncate: cut the file after its last complete unit (default ``False``: only read).

    Returns:
        The finished units' markers keyed by unit id, in file order; each marker dict gets
            ``offset`` (byte offset of its first record) and ``line`` (1-based line of its first
            record). Reading stops at the first marker line that is not valid JSON.

    Raises:
        GenerationError: a marker's ``bytes`` differs from the number of record bytes before it
            (the shard is corrupt; remove it to regenerate).
    """
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    if truncate:
        repair_torn_tail(path)
    offset = 0
    block_start = 0
    good_end = 0
    lineno = block_line = 0
    with open(path, "rb") as fh:
        for raw in fh:
            lineno += 1
            offset_next = offset + len(raw)
            if raw.startswith(UNIT_MARKER.encode()) and raw.endswith(b"\n"):
                try:
                    m = json.loads(raw)
                except json.JSONDecodeError:
                    break
                if m.get("bytes") != offset - block_start:
                    raise GenerationError(
                        f"{path}: unit {m.get('_unit')!r} marker says {m.get('bytes')} bytes of "
                        f"records but {offset - block_start} precede it; the shard is corrupt, "
                        f"remove {path} to regenerate it"
                    )
                m["offset"] = block_start
                m["line"] = block_line + 1
                done[m["_unit"]] = m
                block_start = good_end = offset_next
                block_line = lineno
            offset = offset_next
    if truncate and good_end < offset:
        with open(path, "rb+") as fh:
            fh.truncate(good_end)
        logger.info("%s: dropped %d bytes of an unfinished scenario", path, offset - good_end)
    return done


class ShardWriter:
    """Appends finished units to a shard file (flushed at once, fsynced every ``fsync_interval`` seconds).

    The file (and its folder) is created or opened for appending at construction; call
    :meth:`close` at the end.

    Args:
        path: the shard file (:func:`shard_path`).
        fsync_interval: the least time in seconds between two ``fsync`` calls (default 2.0): the
            most generation time a power failure can lose; a killed process loses nothing written.
    """

    def __init__(self, path: Path, fsync_interval: float = 2.0):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "ab")
        self._interval = fsync_interval
        self._last = time.monotonic()

    def write_unit(self, res: Any) -> None:
        """Append ``res`` (a :class:`~generation.engine.units.UnitResult`): its record lines, then its marker.

        The block is written in one call and flushed at once; the file is fsynced when
        ``fsync_interval`` seconds have passed since the last fsync.

        Args:
            res: the generated unit (its ``lines`` and :meth:`~generation.engine.units.UnitResult.marker`).
        """
        body = "".join(line + "\n" for line in res.lines).encode("utf-8")
        self._fh.write(body + (res.marker(len(body)) + "\n").encode("utf-8"))
        self._fh.flush()  # in the kernel now: survives a killed process
        now = time.monotonic()
        if now - self._last >= self._interval:  # bounded loss on power failure
            os.fsync(self._fh.fileno())
            self._last = now

    def close(self) -> None:
        """Flush, fsync and close the file (a second call does nothing)."""
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()


__all__ = [
    "RUN_FILE",
    "SHARDS_DIR",
    "UNIT_MARKER",
    "ShardWriter",
    "line_hash",
    "read_shard",
    "shard_path",
    "verify_shard_block",
]
