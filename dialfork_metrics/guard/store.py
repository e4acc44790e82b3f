"""Durable conversation state for the guard proxy: SQLite in WAL mode.

Every observed turn is one row: the state of its session after the turn (``Session.state()``) and
its verdict, keyed by ``(conversation, prefix)`` where ``prefix`` is a hash chain over the turns
*as the client sees them* (a blocked reply is stored under its fallback text, which is what the
client sends back). A request resumes from the longest stored prefix of its history, so

* a retry (the reply was lost, e.g. the proxy was killed before answering) resumes from the same
  state and observes the new reply: no turn is counted twice;
* an edited or regenerated history branches from where it diverges;
* after ``kill -9``, the committed rows are intact (WAL) and every conversation continues with
  the verdicts an uninterrupted run gives.

Rows of one request are written in one transaction. ``synchronous=NORMAL`` (the default here)
survives a killed process; ``synchronous="FULL"`` also survives a power cut, at an fsync per
request.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


def chain(prev: str, speaker: str, text: str) -> str:
    """The prefix hash after one more turn (SHA-256 over the previous hash, speaker and text).

    Args:
        prev: The hash of the turns before (``""`` at the start).
        speaker: The turn's speaker.
        text: The turn's text as the client sees it.

    Returns:
        The new hash, 64 hex digits.
    """
    h = hashlib.sha256()
    h.update(prev.encode())
    h.update(b"\x00" + speaker.encode() + b"\x00")
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def prefix_hashes(turns: Sequence[tuple[str, str]]) -> list[str]:
    """``h_1..h_n`` of ``[(speaker, text), ...]`` (``h_0 = ""``).

    Args:
        turns: The conversation's ``(speaker, text)`` turns, in order.

    Returns:
        One hash per turn: ``h_i`` covers the first ``i`` turns.
    """
    out, h = [], ""
    for sp, text in turns:
        h = chain(h, sp, text)
        out.append(h)
    return out


@dataclass(frozen=True)
class Row:
    """One observed turn as stored.

    Attributes:
        conv: The conversation id.
        prefix: The hash of the conversation up to and including this turn (:func:`prefix_hashes`).
        idx: The number of turns up to and including this one.
        speaker: The turn's speaker.
        state: The session state after the turn (``Session.state()``).
        verdict: The turn's verdict.
        blocked: Whether the proxy replaced this (assistant) turn by its fallback text.
    """

    conv: str
    prefix: str
    idx: int
    speaker: str
    state: dict[str, Any]
    verdict: dict[str, Any]
    blocked: bool = False


class StoreError(RuntimeError):
    pass


class Store:
    """One SQLite file; safe to use from several threads (one connection, serialised by a lock).

    Args:
        path: The database file (its folder is created).
        monitor_fingerprint: The fingerprint of the monitor whose sessions the file holds; a file
            of another monitor is refused.
        synchronous: SQLite's ``synchronous``: ``"NORMAL"`` (survives a killed process) or
            ``"FULL"`` (also a power cut, at an fsync per request).

    Raises:
        ValueError: ``synchronous`` is neither ``NORMAL`` nor ``FULL``.
        StoreError: The file is not a usable SQLite database, has another schema version, or
            holds sessions of another monitor.
    """

    def __init__(self, path: str | Path, monitor_fingerprint: str, synchronous: str = "NORMAL"):
        if synchronous.upper() not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be NORMAL or FULL, got {synchronous!r}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=30
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._db.executescript("""
                CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS turns (
                    conv TEXT NOT NULL, prefix TEXT NOT NULL, idx INTEGER NOT NULL, speaker TEXT NOT NULL,
                    state TEXT NOT NULL, verdict TEXT NOT NULL, blocked INTEGER NOT NULL DEFAULT 0,
                    created REAL NOT NULL, PRIMARY KEY (conv, prefix)) WITHOUT ROWID;
            """)
            meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: not a usable SQLite state database ({e})") from e
        if not meta:
            with self._tx():
                self._db.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [("schema_version", str(SCHEMA_VERSION)), ("monitor", monitor_fingerprint)],
                )
        else:
            if meta.get("schema_version") != str(SCHEMA_VERSION):
                raise StoreError(
                    f"{self.path}: state database schema {meta.get('schema_version')!r}, this dialfork "
                    f"reads {SCHEMA_VERSION}; use a new --db"
                )
            if meta.get("monitor") != monitor_fingerprint:
                raise StoreError(
                    f"{self.path}: holds sessions of another monitor ({meta.get('monitor', '?')[:12]}..., "
                    f"this one is {monitor_fingerprint[:12]}...); their states do not apply: use a new --db"
                )

    def _tx(self):
        db = self._db

        class _T:
            def __enter__(self_inner):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self_inner, exc_type, exc, tb):
                db.execute("COMMIT" if exc_type is None else "ROLLBACK")
                return False

        return _T()

    def longest_prefix(
        self, conv: str, hashes: Sequence[str]
    ) -> tuple[int, dict[str, Any] | None, dict[str, Any] | None]:
        """``(i, state, verdict)``: the number of leading turns already observed in ``conv`` and the
        session state and verdict after them.

        Args:
            conv: The conversation id.
            hashes: The prefix hashes of the request's history (:func:`prefix_hashes`).

        Returns:
            ``(i, state, verdict)``; ``(0, None, None)`` for a new conversation.
        """
        if not hashes:
            return 0, None, None
        best = (0, None, None)
        with self._lock:
            for s in range(0, len(hashes), 500):
                part = hashes[s : s + 500]
                q = (
                    f"SELECT idx, state, verdict FROM turns WHERE conv = ? AND prefix IN ({','.join('?' * len(part))}) "
                    "ORDER BY idx DESC LIMIT 1"
                )
                r = self._db.execute(q, (conv, *part)).fetchone()
                if r and r[0] > best[0]:
                    best = (int(r[0]), json.loads(r[1]), json.loads(r[2]))
        return best

    def get(self, conv: str, prefix: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """``(state, verdict)`` stored for exactly this prefix, or ``None``.

        Args:
            conv: The conversation id.
            prefix: A prefix hash.

        Returns:
            ``(state, verdict)``, or ``None`` when that prefix was never stored.
        """
        with self._lock:
            r = self._db.execute(
                "SELECT state, verdict FROM turns WHERE conv = ? AND prefix = ?", (conv, prefix)
            ).fetchone()
        return None if r is None else (json.loads(r[0]), json.loads(r[1]))

    def put(self, rows: Sequence[Row]) -> None:
        """Insert the rows of one request in one transaction (idempotent).

        Args:
            rows: The request's observed turns.
        """
        if not rows:
            return
        now = time.time()
        with self._lock, self._tx():
            self._db.executemany(
                "INSERT OR REPLACE INTO turns VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        r.conv,
                        r.prefix,
                        r.idx,
                        r.speaker,
                        json.dumps(r.state, separators=(",", ":"), allow_nan=False),
                        json.dumps(r.verdict, separators=(",", ":"), allow_nan=False),
                        int(r.blocked),
                        now,
                    )
                    for r in rows
                ],
            )

    def conversation(self, conv: str) -> list[dict[str, Any]]:
        """Every stored turn of ``conv`` (all branches), by turn index.

        Args:
            conv: The conversation id.

        Returns:
            One ``{"turn", "speaker", "prefix", "verdict", "blocked"}`` dict per stored turn.
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT idx, speaker, prefix, verdict, blocked FROM turns WHERE conv = ? "
                "ORDER BY idx, created",
                (conv,),
            ).fetchall()
        return [
            {"turn": i, "speaker": sp, "prefix": p, "verdict": json.loads(v), "blocked": bool(b)}
            for i, sp, p, v, b in rows
        ]

    def count(self) -> int:
        """The number of stored turns, all conversations.

        Returns:
            The row count.
        """
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM turns").fetchone()[0])

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()
