"""The public blind set a submission is checked against (ids and ``T``, never the gold)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------- blind set


@dataclass(frozen=True)
class BlindSet:
    """The public side of the blind test sets: ids and ``T`` (no labels).

    Build it with :meth:`from_dir` (a Hub layout) or :meth:`from_rows`.

    Attributes:
        turns: ``{blind dialogue_id: num_system_turns}`` (T, the largest valid prediction).
        pairs: The Task 2 (metric-track) pair ids; empty when the layout has none.
        source: Where the set was read from (a folder), for messages; may be empty.
    """

    turns: Mapping[str, int]
    pairs: frozenset[str] = frozenset()
    source: str = ""

    @property
    def dialogue_ids(self) -> list[str]:
        """The blind dialogue ids, in the order of ``turns``."""
        return list(self.turns)

    def revision(self) -> str:
        """sha256 over the sorted (id, T) rows and pair ids: which blind set a result used.

        Returns:
            The hex digest; equal for equal sets, whatever their order or ``source``.
        """
        h = hashlib.sha256()
        for did in sorted(self.turns):
            h.update(f"{did}\t{self.turns[did]}\n".encode())
        h.update(b"--\n")
        for pid in sorted(self.pairs):
            h.update(f"{pid}\n".encode())
        return h.hexdigest()

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[Mapping[str, Any]],
        pairs: Iterable[Mapping[str, Any] | str] = (),
        source: str = "",
    ) -> BlindSet:
        """A blind set from rows already in memory.

        Args:
            rows: Blind rows with ``dialogue_id`` and ``num_system_turns``.
            pairs: Task 2 pair ids, or rows with ``pair_id``.
            source: Where the rows come from, for messages.

        Returns:
            The blind set.
        """
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

        Args:
            dest: The Hub layout's root folder.

        Returns:
            The blind set (``pairs`` empty when there is no ``data/blind_task2``; ``source`` is
            ``dest``).

        Raises:
            FileNotFoundError: ``data/blind`` holds no parquet file.
        """
        import pyarrow.parquet as pq

        dest = Path(dest)
        blind = dest / "data" / "blind"
        files = sorted(blind.glob("*.parquet"))
        if not files:
            raise FileNotFoundError(
                f"{blind}: no parquet files; --blind must be a DialFork Hub layout folder "
                "(written by `python -m leaderboard export` / export_hub_layout) holding data/blind/"
            )
        turns: dict[str, int] = {}
        for f in files:
            t = pq.read_table(f, columns=["dialogue_id", "num_system_turns"])
            turns.update(zip(t.column("dialogue_id").to_pylist(), t.column("num_system_turns").to_pylist()))
        pids: list[str] = []
        for f in sorted((dest / "data" / "blind_task2").glob("*.parquet")):
            pids.extend(pq.read_table(f, columns=["pair_id"]).column("pair_id").to_pylist())
        return cls(turns=turns, pairs=frozenset(pids), source=str(dest))
