"""The crash-safe swap of an export: both staged folders replace their targets under a journal; an
interrupted swap is completed, and leftover staging folders removed, by the next export."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..atomic import write_json_atomic
from .layout import default_gold_dir

logger = logging.getLogger(__name__)


def journal(dest: Path) -> Path:
    """The journal file of an export to ``dest``: ``.<name>.export-journal.json`` beside it.

    Args:
        dest: The public layout folder (absolute).

    Returns:
        Path: The journal's path (it exists only while a swap is under way or was interrupted).
    """
    return dest.parent / f".{dest.name}.export-journal.json"


def complete_swap(moves: Sequence[Mapping[str, str]]) -> None:
    """Finish a journaled swap: for each move, the old final folder goes to its backup, the staged
    folder becomes the final one. Idempotent: every step checks what is already done.

    Args:
        moves: The journal's moves, each ``{"staged", "final", "backup"}`` (paths as strings);
            the backups are removed at the end.
    """
    for m in moves:
        staged, final, backup = Path(m["staged"]), Path(m["final"]), Path(m["backup"])
        if staged.exists():
            if final.exists():
                if backup.exists():  # should not happen: backups are unique per export
                    shutil.rmtree(final)
                else:
                    os.replace(final, backup)
            os.replace(staged, final)
    for m in moves:
        shutil.rmtree(m["backup"], ignore_errors=True)


def recover_export(dest: str | os.PathLike, gold_dir: str | os.PathLike | None = None) -> list[str]:
    """Finish an interrupted export to ``dest``/``gold_dir`` and remove leftover staging folders.

    Returns what was done (one line per action). Called at the start of every export.

    Args:
        dest: The public layout folder of the export.
        gold_dir: Its gold folder; None means :func:`~dialfork_dataset.hub.layout.default_gold_dir`
            (``<dest>-gold``).

    Returns:
        list[str]: One line per action taken (a completed interrupted swap, each removed
        ``.<name>.tmp-*`` / ``.<name>.old-*`` leftover); empty when there was nothing to do. Each
        line is also logged as a warning.
    """
    dest = Path(dest).resolve()
    gold = Path(gold_dir).resolve() if gold_dir is not None else default_gold_dir(dest)
    done: list[str] = []
    j = journal(dest)
    if j.exists():
        moves = json.loads(j.read_text(encoding="utf-8"))["moves"]
        complete_swap(moves)
        j.unlink()
        done.append(f"completed the interrupted swap of {dest} and {gold}")
    for folder in (dest, gold):
        for pattern in (f".{folder.name}.tmp-*", f".{folder.name}.old-*"):
            for p in folder.parent.glob(pattern):
                shutil.rmtree(p, ignore_errors=True)
                done.append(f"removed leftover {p}")
    for line in done:
        logger.warning("%s", line)
    return done


def swap_together(pairs: Sequence[tuple[Path, Path]]) -> None:
    """Move each staged folder onto its final path, all or (after a crash) none until the next run
    completes them: the journal is written first, atomically.

    Args:
        pairs: ``(staged folder, final folder)`` pairs; the journal goes beside the first final
            folder, and each old final folder is moved to a ``.<name>.old-*`` backup, then removed.
    """
    moves = []
    for staged, final in pairs:
        backup = final.parent / f".{final.name}.old-{staged.name.rsplit('-', 1)[-1]}"
        moves.append({"staged": str(staged), "final": str(final), "backup": str(backup)})
    j = journal(pairs[0][1])
    write_json_atomic(j, {"moves": moves, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    complete_swap(moves)
    j.unlink()
