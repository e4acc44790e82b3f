"""Task views over a corpus (a ``datasets.Dataset``/``DatasetDict`` or a list of records).

* :func:`task1_sets`: per (task, type) the reference set D+ and the four fork sets D^h_k (SPEC 5);
* :func:`task2_quartets`: per (conformant source, type) the source and its four forks (SPEC 6);
* :func:`task3_examples`: flat examples with the Task 3 labels (SPEC 8).

Incomplete units are skipped with a warning naming them (the count is in ``skipped``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from . import taxonomy
from .taxonomy import FORK_POSITIONS

logger = logging.getLogger(__name__)


def _rows(data: Any) -> list[Mapping[str, Any]]:
    if hasattr(data, "keys") and hasattr(data, "values") and not isinstance(data, Mapping | list):
        # DatasetDict: all splits
        out: list[Mapping[str, Any]] = []
        for split in data.values():
            out.extend(split)
        return out
    if isinstance(data, Mapping) and "turns" not in data:  # plain {split: rows}
        out = []
        for v in data.values():
            out.extend(v)
        return out
    return list(data)


def _dedup(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    seen: set[str] = set()
    out = []
    for r in rows:
        if r["dialogue_id"] in seen:
            continue
        seen.add(r["dialogue_id"])
        out.append(r)
    return out


class _SkipLog(list):
    def add(self, what: str) -> None:
        self.append(what)
        logger.warning("skipped %s", what)


def task1_sets(
    data: Any, min_reference: int = 2, skipped: list | None = None
) -> dict[tuple[str, str], dict[Any, list]]:
    """Task 1 units: per (task, type), the conformant reference set and the forks at each position.

    A (task, type) unit is skipped (with a warning, appended to ``skipped``) when the task has
    fewer than ``min_reference`` conformant dialogues or a fork position has no dialogue.

    Args:
        data: Records: a list of record dicts, a ``datasets.Dataset`` or ``DatasetDict`` (all
            splits), or a ``{split: rows}`` mapping. Duplicate dialogue ids are kept once.
        min_reference: Fewest conformant dialogues a task needs.
        skipped: A list that receives a description of each skipped unit.

    Returns:
        ``{(task, type): {"reference": [D+...], 1: [...], 2: [...], 3: [...], 4: [...]}}``.
    """
    rows = _dedup(_rows(data))
    skip = _SkipLog()
    refs: dict[str, list] = defaultdict(list)
    forks: dict[tuple[str, str], dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["hallucination_type"] is None:
            refs[r["task"]].append(r)
        else:
            forks[(r["task"], r["hallucination_type"])][r["fork_position"]].append(r)
    out: dict[tuple[str, str], dict[Any, list]] = {}
    for task in sorted(set(refs) | {t for t, _ in forks}):
        for h in taxonomy.names():
            unit = forks.get((task, h))
            if len(refs.get(task, [])) < min_reference:
                if unit:
                    skip.add(
                        f"Task 1 unit ({task}, {h}): {len(refs.get(task, []))} conformant dialogue(s) < {min_reference}"
                    )
                continue
            if not unit:
                skip.add(f"Task 1 unit ({task}, {h}): no forks of this type")
                continue
            missing = [k for k in FORK_POSITIONS if not unit.get(k)]
            if missing:
                skip.add(f"Task 1 unit ({task}, {h}): no forks at position(s) {missing}")
                continue
            out[(task, h)] = {"reference": refs[task], **{k: unit[k] for k in FORK_POSITIONS}}
    if skipped is not None:
        skipped.extend(skip)
    return out


def task2_quartets(data: Any, skipped: list | None = None) -> list[dict[str, Any]]:
    """Task 2 units: each (source, type) with its four forks, in canonical order.

    A (source, type) unit missing a fork position (or whose source is absent) is skipped with a
    warning and appended to ``skipped``.

    Args:
        data: Records: a list of record dicts, a ``datasets.Dataset`` or ``DatasetDict`` (all
            splits), or a ``{split: rows}`` mapping. Duplicate dialogue ids are kept once.
        skipped: A list that receives a description of each skipped unit.

    Returns:
        ``[{"source": D+, "type": h, "forks": {1: D, 2: D, 3: D, 4: D}}]``.
    """
    rows = _dedup(_rows(data))
    skip = _SkipLog()
    sources = {r["dialogue_id"]: r for r in rows if r["hallucination_type"] is None}
    forks: dict[tuple[str, str], dict[int, Mapping]] = defaultdict(dict)
    for r in rows:
        if r["hallucination_type"] is not None:
            forks[(r["source_id"], r["hallucination_type"])][r["fork_position"]] = r
    out = []
    for (sid, h), fk in sorted(forks.items(), key=lambda kv: (kv[0][0], taxonomy.names().index(kv[0][1]))):
        if sid not in sources:
            skip.add(f"Task 2 unit ({sid}, {h}): source dialogue not in the data")
            continue
        missing = [k for k in FORK_POSITIONS if k not in fk]
        if missing:
            skip.add(f"Task 2 unit ({sid}, {h}): missing fork position(s) {missing}")
            continue
        out.append({"source": sources[sid], "type": h, "forks": {k: fk[k] for k in FORK_POSITIONS}})
    if skipped is not None:
        skipped.extend(skip)
    return out


def task3_examples(data: Any) -> list[dict[str, Any]]:
    """Flat Task 3 examples with labels.

    Args:
        data: Records: a list of record dicts, a ``datasets.Dataset`` or ``DatasetDict`` (all
            splits), or a ``{split: rows}`` mapping. Duplicate dialogue ids are kept once.

    Returns:
        One dict per dialogue: ``dialogue_id, turns, num_system_turns, hallucination_type,
        fork_position, fork_turn, task`` (conformant: type, position and turn null).
    """
    keys = (
        "dialogue_id",
        "turns",
        "num_system_turns",
        "hallucination_type",
        "fork_position",
        "fork_turn",
        "task",
    )
    return [{k: r.get(k) for k in keys} for r in _dedup(_rows(data))]
